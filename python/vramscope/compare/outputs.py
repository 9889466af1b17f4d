"""What `vramscope compare` writes: never over one of its inputs, and each file whole or not at all.
(The C++ commands keep the same rules in src/vramscope/common/file.h.)"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Mapping, Sequence


class OutputError(ValueError):
    """An output that would destroy an input, or that cannot be written; the message says which."""


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file: the same path once links are resolved, or, where both
    exist, the same device and inode (hard links, bind mounts)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        sa, sb = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def refuse_overwriting(outputs: Mapping[str, str | os.PathLike[str]], inputs: Sequence[str | os.PathLike[str]]) -> None:
    """Raises OutputError, before anything is written, when an output names an input or another
    output. `outputs`: what each is (an option, a file's role) -> its path."""
    named = list(outputs.items())
    for i, (what, path) in enumerate(named):
        for source in inputs:
            if same_file(path, source):
                raise OutputError(f"{what} {path} is an input ({source}): writing it would destroy it")
        for other, other_path in named[:i]:
            if same_file(path, other_path):
                raise OutputError(f"{what} and {other} both name {path}")


def refuse_inside(folder: Path, paths: Sequence[str | os.PathLike[str]]) -> None:
    """Raises OutputError when a path lies inside a folder the run will remove parts of."""
    root = os.path.realpath(folder)
    for path in paths:
        if os.path.commonpath([root, os.path.realpath(path)]) == root:
            raise OutputError(f"{path} lies inside {folder}, which the run replaces: move it, or choose another -o")


def write_atomic(path: Path, text: str) -> None:
    """The whole text or nothing: written beside `path` under a temporary name, then renamed over
    it, so a reader or a second writer never sees part of it."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(temporary, 0o666 & ~_UMASK)  # as a file opened for writing would be, not mkstemp's 0600
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # once, at import: setting it back and forth while cells run would race
