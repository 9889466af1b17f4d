"""What a test or a run may hold, and a judged capture held to it. Policy only: the verdicts and
per-site rates are the analysis's (the one judge); this file parses sizes, compares and words it.

Sizes are written as pytest-memray's markers write them ("24 MB", "1 MiB", "512KB", "+1.5 GiB") and
are read by the command line's one rule (`--device-memory`): the unit required, MB is 10^6 bytes, MiB 2^20.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import Any

from .. import _core
from ..capture import Source

STACK_SHOWN = 4  # frames of a leak's stack in a report
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_size(size: str | int, what: str = "size") -> int:
    """Bytes in a size such as "24 MB" or "1 MiB" (an int is bytes), by the command line's rule:
    the unit required. A clear ValueError naming `what` otherwise."""
    if isinstance(size, int) and not isinstance(size, bool) and 0 <= size < 1 << 64:  # True is no size
        return size
    if not isinstance(size, str):
        raise ValueError(f"{what} takes a size such as \"24 MB\", \"1 MiB\" or \"512 KiB\" (MB is 10^6 bytes, "
                         f"MiB 2^20); got {size!r}")
    return _core.size_with_unit(size, what, 0)


@dataclass
class Judged:
    """One capture, analysed: the findings (docs/findings.md), what was recorded, the peak."""

    source: Source
    findings: dict[str, Any] | None  # None: nothing was captured, `problem` says why
    peak_allocated: int = 0
    problem: str = ""

    @property
    def how(self) -> str:
        return f"judged from {self.source.value}" + (", no CUDA here" if self.source is Source.live_tensors else "")


class Broken(enum.Enum):
    """Which limit a check broke, or that it could not be checked."""

    leak = "leak"
    peak = "peak"
    cannot_judge = "cannot judge"


@dataclass
class Failure:
    broken: Broken
    text: str  # what the report says


def leaks_over(judged: Judged, limit: int) -> list[dict[str, Any]]:
    """The leaking sites (the judge's verdict) whose bytes/step exceed the limit."""
    return [leak for leak in (judged.findings or {}).get("leaks", []) if leak["bytes_per_step"] > limit]


def failures(judged: Judged, *, leak_limit: int | None = None, memory_limit: int | None = None) -> list[Failure]:
    """What breaks the limits, as the report says it; empty when within them."""
    if judged.findings is None:
        return [Failure(Broken.cannot_judge, f"vramscope could not measure this ({judged.problem}), so it cannot "
                                             "say there is no leak")]
    out = []
    if leak_limit is not None:
        if judged.findings["verdict"] == _core.Verdict.cannot_judge.spelling:
            why = "; ".join(judged.findings.get("input_faults") or judged.findings.get("notes") or [])
            out.append(Failure(Broken.cannot_judge, f"vramscope cannot judge this ({judged.how}): {why}"))
        out += [Failure(Broken.leak, leak_report(leak, leak_limit, judged)) for leak in leaks_over(judged, leak_limit)]
    if memory_limit is not None and judged.peak_allocated > memory_limit:
        out.append(Failure(Broken.peak, f"peak allocated {_core.format_bytes(judged.peak_allocated)} is over the "
                                        f"limit of {_core.format_bytes(memory_limit)} ({judged.how})"
                                        + peak_report(judged.findings)))
    return out


def peak_report(findings: dict[str, Any]) -> str:
    """What the peak held (docs/findings.md, the peak): where it fell, its largest categories, modules
    and sites; empty for findings without one."""
    peaks = findings.get("peak") or []
    if not peaks:
        return ""
    peak = max(peaks, key=lambda p: p["bytes"])
    when = f"step {peak['step']}, {peak['phase']}" + (f", in {peak['module']}" if peak.get("module") else "")
    parts = sorted((c for c in peak["categories"] if c["bytes"]), key=lambda c: -c["bytes"])
    lines = [f"\n  at {when}: " + ", ".join(f"{c['category']} {_core.format_bytes(c['bytes'])}" for c in parts[:4])]
    modules = [m for m in peak.get("modules", []) if m["module"]][:3]
    if modules:
        lines.append("  by module: " + ", ".join(f"{m['module']} {_core.format_bytes(m['bytes'])} ({m['category']})"
                                                 for m in modules))
    for site in peak["sites"][:3]:
        at = site["site"]
        lines.append(f"  {_core.format_bytes(site['bytes'])} {site['category']} at "
                     f"{os.path.basename(at['file'])}:{at['line']} {at['function']}")
    return "\n".join(lines)


def leak_report(leak: dict[str, Any], limit: int, judged: Judged) -> str:
    """A leaking site as a failing test shows it: rate, site, stream, stack, who holds it."""
    site = leak["site"]
    where = f"{os.path.basename(site['file'])}:{site['line']} {site['function']}"
    stream = "host memory" if judged.source is Source.live_tensors else f"{leak['stream_kind']} stream"
    lines = [f"leak: +{_core.format_bytes(leak['bytes_per_step'])}/step at {where}, over the limit of "
             f"{_core.format_bytes(limit)}/step ({judged.how})",
             f"  {leak['shape']} since step {leak['first_step']}, {stream}, confidence {leak['confidence']:.2f}, "
             f"{_core.format_bytes(leak['live_bytes'])} held at the end"]
    stack = leak["stack"][leak.get("stack_shown_from", 0):]
    # From the site out: the frames inside it are torch's and vramscope's own (a live-tensor capture).
    at_site = next((i for i, f in enumerate(stack) if (f["file"], f["line"]) == (site["file"], site["line"])), 0)
    # Up to the caller's outermost frame before vramscope's own (assert_no_leak, the pytest plugin).
    ours = next((i for i in range(at_site, len(stack)) if stack[i]["file"].startswith(PACKAGE_DIR)), len(stack))
    shown = stack[at_site:ours][:STACK_SHOWN]
    lines += [f"  at {frame['function']}  {frame['file']}:{frame['line']}" for frame in shown]
    owners = leak.get("owners") or []
    lines += [f"  held by {o['path']}  → {o['target']}" + ("" if o["kind"] == "reachable" else f"   ({o['kind']})")
              for o in owners]
    if not owners:
        lines.append("  held by: not found from Python (freed since, or held by C++ state)")
    return "\n".join(lines)
