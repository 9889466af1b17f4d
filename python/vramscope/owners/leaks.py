"""From a leak to who holds it: the leak's newest live blocks (from the trace or the live monitor, so
blocks freed and reused since are not among them) → the objects whose memory lies in them now, by
the rule for the leak's memory (targets.py: tensors, pinned tensors, CuPy or JAX arrays; a registry,
or no object at all) → one search of the object graph for all of them (paths.holders_of), within a
time budget."""

from __future__ import annotations

import sys
import time
import warnings
from typing import Any, Callable, Iterable

from .. import _core
from .._core import format_bytes
from .paths import OwnerPath, holders_of
from .targets import memory_of, pooled, targets_of

BLOCKS_TRIED = 8  # the newest live blocks of a leak: the ones its latest steps left


def _bulk(objects: list[object], nbytes: Callable[[object], int]) -> list[object]:
    """The objects that hold the bulk of the memory: at least a tenth of the largest. The search
    returns only the shortest paths, and the one to a 4-byte scalar beside the leak explains little."""
    sizes = [nbytes(o) for o in objects]
    return [o for o, n in zip(objects, sizes) if n * 10 >= max(sizes, default=0)]


def owners_of_blocks(leak: dict[str, Any], blocks: Iterable[tuple[int, int]], *, max_paths: int = 3, budget: float = 5.0,
                     skip_frames: set[int] | None = None, device_type: str = "cuda") -> tuple[list[OwnerPath], str]:
    """Who holds what lies in these (address, size) blocks of `leak` (a finding or a live line: its
    device, memory and library say what to look for): one walk for all of it. Returns the paths and a
    note ("" when the search ran its course)."""
    deadline = time.monotonic() + budget
    objects: list[object] = []
    with warnings.catch_warnings():  # a scan of every object touches deprecated ones
        warnings.simplefilter("ignore")
        try:
            targets = targets_of(leak, list(blocks)[:BLOCKS_TRIED], device_type)
            if targets.known or not targets.objects:
                return targets.known[:max_paths], targets.missing
            objects = _bulk(targets.objects, targets.nbytes)
            if pooled(leak):  # a pool's arrays, oldest first: the longest kept, never the step's newest (the loop's locals)
                objects = objects[:BLOCKS_TRIED]
            describe = targets.describe
            del targets
            skip = {id(sys._getframe())} | (skip_frames or set())
            found = holders_of(objects, skip, max_paths, deadline, describe)
        except Exception as e:  # objects (or a library's registry) that misbehave: no owner, never a crash
            return [], f"the owner search failed ({type(e).__name__}: {e})"
        finally:
            del objects
    if not found and time.monotonic() >= deadline:
        return [], f"the owner search stopped at its {budget:.1f} s budget (VRAMSCOPE_EXPLAIN_BUDGET)"
    return found, ""


def blocks_to_try(leak: dict[str, Any]) -> list[tuple[int, int]]:
    """A finding's live blocks in the order a search tries them: a buffer replaced by a bigger one
    every step, its largest first (what grows; the step's other blocks under the same line are a
    batch in hand, a forward's outputs); a pool's (evidence pool-in-use), oldest first; else the
    newest first (what the latest steps left)."""
    blocks = [(int(b[0]), int(b[1])) for b in leak.get("live_blocks", [])]
    if pooled(leak):  # a pool's blocks, oldest first: its longest-kept arrays lie in them
        return blocks
    if leak.get("evidence") == "replaced-bigger":
        return sorted(blocks, key=lambda b: -b[1])
    return blocks[::-1]


def owners_of_leaks(findings: dict[str, Any], *, max_leaks: int = 3, max_paths: int = 3, timeout: float = 5.0,
                    device_type: str = "cuda") -> list[dict[str, Any]]:
    """For the largest leaks of a findings dict (one run): their answers, as explained() gives them.
    device_type: where the capture's memory lives ("cpu" for live tensors)."""
    out = []
    for leak in findings.get("leaks", [])[:max_leaks]:
        owners, note = owners_of_blocks(leak, blocks_to_try(leak)[:BLOCKS_TRIED], max_paths=max_paths, budget=timeout, device_type=device_type)
        out.append(explained(leak, owners, note))
    return out


def explained(leak: dict[str, Any], owners: list[OwnerPath], note: str, step: int | None = None) -> dict[str, Any]:
    """One leak's answer, as findings and the owners sidecar keep it; `step`: found during the run."""
    return {"site": leak["site"], "allocated_in": leak.get("allocated_in"), "bytes_per_step": leak["bytes_per_step"],
            "device": leak["device"],
            "memory": memory_of(leak), "library": leak.get("library", ""),
            "owners": [o.to_json() for o in owners], "owner_lines": [str(o) for o in owners],
            "note": note, "found_at_step": step}


def same_site(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """One site's answers: torch's memory and a library's at one line are two leaks, and so are two
    library functions allocating under one line of the user's (analysis/sites.h splits the site)."""
    return _site_key(a) == _site_key(b)


def _site_key(leak: dict[str, Any]) -> tuple[object, ...]:
    via = leak.get("allocated_in") or {}
    return (leak["site"]["file"], leak["site"]["line"], leak["site"]["function"], leak["device"], memory_of(leak),
            via.get("file"), via.get("function"))


def render_owners(explained_leaks: list[dict[str, Any]]) -> str:
    lines = []
    for leak in explained_leaks:
        site = leak["site"]
        where = f"{site['file'].rsplit('/', 1)[-1]}:{site['line']} {site['function']}"
        when = f", found at step {leak['found_at_step']:,}" if leak.get("found_at_step") is not None else ""
        memory = memory_of(leak)
        whose = f" of {memory} memory from {leak['library']}" if memory != _core.Memory.torch.spelling else ""
        lines.append(f"  {where}  (+{format_bytes(leak['bytes_per_step'])}/step{whose}{when})")
        if not leak["owner_lines"]:
            lines.append("    " + (leak.get("note") or "no live tensor of this leak was found from Python"))
        lines += [f"    {line}" for line in leak["owner_lines"]]
    return "Who holds it\n" + "\n".join(lines) + "\n" if lines else ""
