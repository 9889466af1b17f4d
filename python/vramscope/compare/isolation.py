"""Where a cell runs: its own copies of the trees its variant patches, never the user's.

A patched tree is a copy (a git tree's tracked and untracked files, as they are now, uncommitted
changes included; `ref` takes the project as committed at that ref through `git archive`, which
leaves the repository as it was). Patches are applied with `git apply` confined to the copy. The
project's copy becomes the command's directory, and each copy goes first on PYTHONPATH so the
patched code is what the command imports.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .matrix import Matrix, Variant


class SetupError(RuntimeError):
    """A cell that cannot be prepared as asked (a patch that does not apply, an unknown ref)."""


@dataclass
class Workspace:
    cwd: str
    pythonpath: list[str] = field(default_factory=list)
    copies: dict[str, str] = field(default_factory=dict)  # original tree -> its copy

    def command(self, command: list[str]) -> list[str]:
        """The command with paths into a copied tree pointing into its copy."""
        return [self._moved(a) for a in command]

    def _moved(self, arg: str) -> str:
        for tree, copy in self.copies.items():
            if arg == tree or arg.startswith(tree + os.sep):
                return copy + arg[len(tree):]
        return arg


def _git(tree: str, *args: str, **kw: Any) -> subprocess.CompletedProcess[Any]:
    return subprocess.run(["git", "-C", tree, *args], capture_output=True, **kw)


def _is_git_tree(tree: str) -> bool:
    try:
        return bool(_git(tree, "rev-parse", "--is-inside-work-tree", text=True).stdout.strip() == "true")
    except OSError:  # no git
        return False


def copy_tree(tree: str, dest: Path, exclude: Path) -> None:
    """The tree's files as they are now: for a git tree, tracked and untracked ones not ignored."""
    dest.mkdir(parents=True)
    exclude = exclude.resolve()
    if _is_git_tree(tree):
        listed = _git(tree, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--deduplicate")
        names = [n for n in listed.stdout.decode(errors="surrogateescape").split("\0") if n]
    else:
        names = [str(p.relative_to(tree)) for p in Path(tree).rglob("*")
                 if not p.is_dir() and ".git" not in p.parts and "__pycache__" not in p.parts]
    for name in names:
        source = Path(tree, name)
        if exclude == source.resolve() or exclude in source.resolve().parents or not os.path.lexists(source):
            continue  # the compare's own output inside the project; a file deleted but not committed
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)


def archive_ref(project: str, ref: str, dest: Path) -> None:
    """The project as committed at `ref`, without touching its repository or work tree."""
    if not _is_git_tree(project):
        raise SetupError(f"ref {ref}: {project} is not a git work tree")
    if _git(project, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").returncode != 0:
        raise SetupError(f"ref {ref}: not a commit of {project}")
    dest.mkdir(parents=True)
    with subprocess.Popen(["git", "-C", project, "archive", "--format=tar", ref], stdout=subprocess.PIPE) as git:
        try:
            with tarfile.open(fileobj=git.stdout, mode="r|") as tar:
                tar.extractall(dest, filter="data")
        except tarfile.TarError as e:  # git's archive cut short, or a member the data filter refuses
            raise SetupError(f"ref {ref}: the archive could not be unpacked ({e})") from None
    if git.returncode != 0:
        raise SetupError(f"ref {ref}: git archive failed ({git.returncode})")


def apply_patch(patch: str, copy: Path) -> None:
    """git apply inside the copy only: the ceiling stops git from finding a repository around it
    (the output folder may lie inside the user's), so paths resolve in the copy and nowhere else.
    git apply is all or nothing: a patch that fails leaves the copy as it was."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(copy.parent)}
    result = subprocess.run(["git", "apply", "--whitespace=nowarn", patch], cwd=copy, env=env, capture_output=True,
                            text=True)
    if result.returncode != 0:
        raise SetupError(f"patch {os.path.basename(patch)} does not apply to {copy.name}: "
                         f"{result.stderr.strip().splitlines()[-1] if result.stderr.strip() else 'git apply failed'}")


def prepare(matrix: Matrix, variant: Variant, cell_dir: Path, out_dir: Path) -> Workspace:
    """The cell's workspace under cell_dir/trees (cell_dir new); the user's trees are only read."""
    trees_dir = cell_dir / "trees"
    workspace = Workspace(matrix.project)
    roots: dict[str, str] = {}
    if variant.ref:
        copy = trees_dir / (Path(matrix.project).name or "project")
        archive_ref(matrix.project, variant.ref, copy)
        workspace.copies[matrix.project] = str(copy)
        roots[matrix.project] = ""
    for patch in variant.patches:
        roots.setdefault(patch.tree, patch.import_root)
        if patch.tree not in workspace.copies:
            copy = trees_dir / f"{len(workspace.copies)}-{Path(patch.tree).name}"
            copy_tree(patch.tree, copy, out_dir)
            workspace.copies[patch.tree] = str(copy)
        apply_patch(patch.file, Path(workspace.copies[patch.tree]))
    if matrix.project in workspace.copies:
        workspace.cwd = workspace.copies[matrix.project]
    workspace.pythonpath = [os.path.join(workspace.copies[tree], root) if root else workspace.copies[tree]
                            for tree, root in roots.items()]
    return workspace
