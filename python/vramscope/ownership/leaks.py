"""From a leak to who holds it: the leak's newest live blocks (from the trace or the live monitor, so
blocks freed and reused since are not among them) → the tensors whose storage lies in them now →
one search of the object graph for all of them (paths.holders_of), within a time budget."""

from __future__ import annotations

import bisect
import gc
import sys
import time
import warnings

from .._core import format_bytes
from .paths import OwnerPath, holders_of

BLOCKS_TRIED = 8  # the newest live blocks of a leak: the ones its latest steps left


def live_tensors_by_block(device: int, blocks, device_type: str = "cuda") -> dict:
    """(addr, end) of each block -> a tensor whose storage starts inside it. `device_type` "cpu": the
    blocks of a live-tensor capture, which has no device number of its own."""
    import torch

    spans = sorted((addr, addr + size) for addr, size in blocks)
    found = {}
    if not spans:
        return found
    firsts = [s for s, _ in spans]
    for obj in gc.get_objects():
        # type(), not isinstance(): a dead weakref proxy raises ReferenceError on __class__.
        if not issubclass(type(obj), torch.Tensor):
            continue
        try:
            where = obj.device
            if where.type != device_type or (device_type == "cuda" and where.index != device):
                continue
            ptr = obj.untyped_storage().data_ptr()
        except Exception:  # a tensor subclass or fake tensor without storage
            continue
        i = bisect.bisect_right(firsts, ptr) - 1
        if i >= 0 and ptr < spans[i][1] and spans[i] not in found:
            found[spans[i]] = obj
    return found


def _bulk(tensors: list) -> list:
    """The tensors that hold the bulk of the memory: at least a tenth of the largest. The search
    returns only the shortest paths, and the one to a 4-byte scalar beside the leak explains little."""
    sizes = [t.untyped_storage().nbytes() for t in tensors]
    return [t for t, n in zip(tensors, sizes) if n * 10 >= max(sizes, default=0)]


def owners_of_blocks(device: int, blocks, *, max_paths: int = 3, budget: float = 5.0,
                     skip_frames: set | None = None, device_type: str = "cuda") -> tuple[list[OwnerPath], str]:
    """Who holds the tensors in these (address, size) blocks: one walk for all of them. Returns
    the paths and a note ("" when the search ran its course)."""
    deadline = time.monotonic() + budget
    with warnings.catch_warnings():  # a scan of every object touches deprecated ones
        warnings.simplefilter("ignore")
        tensors = _bulk(list(live_tensors_by_block(device, list(blocks)[:BLOCKS_TRIED], device_type).values()))
        if not tensors:
            return [], "no live tensor of this leak was found from Python (freed since, or held by C++ state)"
        skip = {id(sys._getframe())} | (skip_frames or set())
        try:
            found = holders_of(tensors, skip, max_paths, deadline)
        except Exception as e:  # objects that die or misbehave mid-walk: no owner, never a crash
            return [], f"the owner search failed ({type(e).__name__}: {e})"
        finally:
            del tensors
    if not found and time.monotonic() >= deadline:
        return [], f"the owner search stopped at its {budget:.1f} s budget (VRAMSCOPE_EXPLAIN_BUDGET)"
    return found, ""


def owners_of_leaks(findings: dict, *, max_leaks: int = 3, max_paths: int = 3, timeout: float = 5.0) -> list[dict]:
    """For the largest leaks of a findings dict (one run): [{"site", "bytes_per_step", "device", "owners",
    "owner_lines", "note"}]."""
    out = []
    for leak in findings.get("leaks", [])[:max_leaks]:
        blocks = [tuple(b) for b in leak.get("live_blocks", [])][-BLOCKS_TRIED:][::-1]  # newest first
        owners, note = owners_of_blocks(leak["device"], blocks, max_paths=max_paths, budget=timeout)
        out.append(explained(leak["site"], leak["device"], leak["bytes_per_step"], owners, note))
    return out


def explained(site: dict, device: int, bytes_per_step: float, owners: list[OwnerPath], note: str,
              step: int | None = None) -> dict:
    """One leak's answer, as findings and the owners sidecar keep it; `step`: found during the run."""
    return {"site": site, "bytes_per_step": bytes_per_step, "device": device,
            "owners": [o.to_json() for o in owners], "owner_lines": [str(o) for o in owners],
            "note": note, "found_at_step": step}


def same_site(a: dict, b: dict) -> bool:
    return (a["site"]["file"], a["site"]["line"], a["site"]["function"], a["device"]) == (
        b["site"]["file"], b["site"]["line"], b["site"]["function"], b["device"])


def render_owners(explained_leaks: list[dict]) -> str:
    lines = []
    for leak in explained_leaks:
        site = leak["site"]
        where = f"{site['file'].rsplit('/', 1)[-1]}:{site['line']} {site['function']}"
        when = f", found at step {leak['found_at_step']:,}" if leak.get("found_at_step") is not None else ""
        lines.append(f"  {where}  (+{format_bytes(leak['bytes_per_step'])}/step{when})")
        if not leak["owner_lines"]:
            lines.append("    " + (leak.get("note") or "no live tensor of this leak was found from Python"))
        lines += [f"    {line}" for line in leak["owner_lines"]]
    return "Who holds it\n" + "\n".join(lines) + "\n" if lines else ""
