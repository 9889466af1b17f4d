"""From a leak finding to who holds it: the finding's live blocks (from the trace, so blocks freed
and reused since are not among them) → the tensors whose storage lies in them now → who_holds()."""

from __future__ import annotations

import gc
import time
import warnings

from .._core import format_bytes
from .paths import OwnerPath, who_holds

BLOCKS_TRIED = 8  # the newest live blocks of a leak: the ones its latest steps left


def live_tensors_by_block(device: int, blocks) -> dict:
    """(addr, size) of each block -> a tensor whose storage starts inside it."""
    import torch

    starts = sorted((addr, addr + size) for addr, size in blocks)
    found = {}
    if not starts:
        return found
    import bisect

    firsts = [s for s, _ in starts]
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj.is_cuda and obj.device.index == device:
            ptr = obj.untyped_storage().data_ptr()
            i = bisect.bisect_right(firsts, ptr) - 1
            if i >= 0 and ptr < starts[i][1] and starts[i] not in found:
                found[starts[i]] = obj
    return found


def owners_of_leaks(findings: dict, *, max_leaks: int = 3, max_paths: int = 3, timeout: float = 5.0) -> list[dict]:
    """For the largest leaks of a findings dict (one run): [{"site", "bytes_per_step", "owners"}]."""
    out = []
    for leak in findings.get("leaks", [])[:max_leaks]:
        blocks = [tuple(b) for b in leak.get("live_blocks", [])][-BLOCKS_TRIED:]
        with warnings.catch_warnings():  # a scan of every object touches deprecated ones
            warnings.simplefilter("ignore")
            tensors = live_tensors_by_block(leak["device"], blocks)
        owners: list[OwnerPath] = []
        deadline = time.monotonic() + timeout
        for block in reversed(blocks):  # newest first
            tensor = tensors.get((block[0], block[0] + block[1]))
            if tensor is None or time.monotonic() > deadline:
                continue
            for p in who_holds(tensor, max_paths=max_paths, timeout=max(0.1, deadline - time.monotonic())):
                if p.path not in {o.path for o in owners}:
                    owners.append(p)
            del tensor
            if len(owners) >= max_paths:
                break
        out.append({"site": leak["site"], "bytes_per_step": leak["bytes_per_step"], "device": leak["device"],
                     "owners": [o.to_json() for o in owners[:max_paths]],
                     "owner_lines": [str(o) for o in owners[:max_paths]]})
    return out


def merge_owners(findings: dict, explained: list[dict]) -> None:
    """Puts each leak's owners into the findings as leaks[].owners (docs/findings.md)."""
    for leak in findings.get("leaks", []):
        for e in explained:
            if e["site"] == leak["site"] and e["device"] == leak["device"]:
                leak["owners"] = e["owners"]


def render_owners(explained: list[dict]) -> str:
    lines = []
    for leak in explained:
        site = leak["site"]
        where = f"{site['file'].rsplit('/', 1)[-1]}:{site['line']} {site['function']}"
        lines.append(f"  {where}  (+{format_bytes(leak['bytes_per_step'])}/step)")
        if not leak["owner_lines"]:
            lines.append("    no live tensor of this leak was found from Python (freed since, or held by C++ state)")
        lines += [f"    {line}" for line in leak["owner_lines"]]
    return "Who holds it\n" + "\n".join(lines) + "\n" if lines else ""
