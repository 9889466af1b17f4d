"""Where a process's trace goes: one file per process, the rank in its name."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping

SUFFIX = ".vscope"


def without_suffix(name: str) -> str:
    """A trace's name without its .vscope, which the names a run writes are built on."""
    return name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name


def process_rank(env: Mapping[str, str] = os.environ) -> int | None:
    """This process's rank: RANK (torchrun), else torch.distributed's once its group is up (Lightning's
    launcher sets no RANK); None outside a distributed run."""
    rank = env.get("RANK")
    if rank is not None and rank.isdigit():
        return int(rank)
    dist = sys.modules.get("torch.distributed")  # never imported here: `vramscope run` starts before torch
    try:
        return dist.get_rank() if dist is not None and dist.is_available() and dist.is_initialized() else None
    except Exception:
        return None


def trace_path(base: str | os.PathLike[str], *, env: Mapping[str, str] = os.environ, shared_name: bool = True) -> Path:
    """`run.vscope` for a single process; `run.rank3.vscope` for rank 3 of a distributed run; and
    `run.pid1234.vscope` for any other process of a launched run (shared_name=False), so that
    nothing two processes write ever lands in one file."""
    base = Path(base)
    stem = without_suffix(base.name)
    rank = process_rank(env)
    if rank is not None:
        return base.with_name(f"{stem}.rank{rank}{SUFFIX}")
    if not shared_name:
        return base.with_name(f"{stem}.pid{os.getpid()}{SUFFIX}")
    return base.with_name(stem + SUFFIX)


def run_files(base: str | os.PathLike[str], since: float) -> list[Path]:
    """The traces a launched run wrote: the base name and its rank, pid and attach variants, rank order."""
    base = Path(base)
    stem = without_suffix(base.name)
    found = [p for p in base.parent.glob(f"{stem}*{SUFFIX}")
             if (p.name == stem + SUFFIX or p.name[len(stem):].startswith((".rank", ".pid", ".attach")))
             and p.stat().st_mtime >= since]

    def order(p: Path) -> tuple[int, int]:
        middle = p.name[len(stem):-len(SUFFIX)]
        if middle.startswith(".rank") and middle[5:].isdigit():
            return (1, int(middle[5:]))
        return (0 if not middle else 2, 0)

    return sorted(found, key=lambda p: (order(p), p.name))
