"""`vramscope mcp`: a Model Context Protocol server over stdio, for agents (the official `mcp` SDK,
`pip install 'vramscope[mcp]'`). Each tool takes a `path` and reads its findings (docs/findings.md)
through the core's one reader, `findings_of`: a trace or snapshot is analysed with its owners
joined, a findings JSON (*.json) read back. Each answers twice: in text, as the terminal says it,
and as structured content, the findings' own fields. A bad input is that call's tool error; the
server goes on. Nothing but the protocol may reach stdout: the core's commands that print are
never called here.
"""

from __future__ import annotations

import inspect
import json
import os
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent

from . import __version__, _core

INSTRUCTIONS = """vramscope finds GPU memory leaks in PyTorch training runs. Give `analyze` a trace
(.vscope, from `vramscope run`), a torch memory snapshot (.pickle or .pickle.gz, from
torch.cuda.memory._dump_snapshot) or a findings JSON (`vramscope analyze --json`): it says whether
memory leaks, how fast, where, and what the peak holds. `leaks`, `owners` and `peak` give one part
of the same findings; `diff` sets two runs side by side; `compare_table` reads a `vramscope compare`
run's OUT/compare.json. Relative paths are from the server's working directory."""

# The core's errors: unreadable or hostile input, refused options, a failed read.
INPUT_ERRORS = (RuntimeError, ValueError, OSError, MemoryError)


def answer(text: str, structured: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


def findings(path: str) -> tuple[_core.Analysis, dict[str, Any]]:
    """The input's analysis and its findings JSON as a dict: one run's, or {"verdict", "runs"}."""
    try:
        analysis = _core.findings_of(os.fspath(path))
    except INPUT_ERRORS as e:
        raise ToolError(f"vramscope: {e}") from None
    return analysis, json.loads(analysis.json())


def runs_of(model: dict[str, Any]) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = model.get("runs", [model])
    return runs


def where(site: dict[str, Any]) -> str:
    """A site as the summary names it; one with no line (no Python frame, a shared object) by its file."""
    if not site["line"]:
        return f"{site['file']} {site['function']}".strip()
    return f"{os.path.basename(site['file'])}:{site['line']} {site['function']}"


def rate(bytes_per_step: float) -> str:
    return f"+{_core.format_bytes(bytes_per_step)}/step"


def leak_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    """A run's leaks as an agent needs them to act: the site, rate, since when, on which memory and
    stream, how sure, what it holds, the frames shown (the findings' stack from stack_shown_from)."""
    return [{"site": leak["site"], "bytes_per_step": leak["bytes_per_step"], "shape": leak["shape"],
             "first_step": leak["first_step"], "memory": leak["memory"], "library": leak["library"],
             "device": leak["device"], "stream_kind": leak["stream_kind"], "confidence": leak["confidence"],
             "live_bytes": leak["live_bytes"], "stack": leak["stack"][leak.get("stack_shown_from", 0):]}
            for leak in run["leaks"]]


def analyze(path: str) -> CallToolResult:
    """Whether memory leaks in a trace, snapshot or findings JSON: the verdict, each leaking site
    with its rate, the ledger of where the growth went, and the peak by category. The text is the
    summary `vramscope analyze` prints."""
    analysis, model = findings(path)
    runs = [{"source": run["source"], "verdict": run["verdict"], "leak_bytes_per_step": run["leak_bytes_per_step"],
             "projected_oom_step": run["projected_oom_step"], "steps": run["steps"], "leaks": leak_rows(run),
             "within_step": run.get("within_step", []), "ledger": run.get("ledger", []), "peak": run.get("peak", []),
             "notes": run.get("notes", []), "input_faults": run.get("input_faults", [])} for run in runs_of(model)]
    return answer(analysis.terminal(), {"verdict": model["verdict"], "runs": runs})


def leaks(path: str) -> CallToolResult:
    """The leaking allocation sites of a trace, snapshot or findings JSON, largest rate first: each
    with its rate in bytes per step, first step, memory, stream, confidence and stack."""
    _, model = findings(path)
    rows = [{"source": run["source"], **row} for run in runs_of(model) for row in leak_rows(run)]
    lines = [f"{rate(r['bytes_per_step'])} at {where(r['site'])} ({r['memory']} memory"
             f"{', ' + r['library'] if r['library'] else ''}, cuda:{r['device']}, {r['stream_kind']} stream, "
             f"{r['shape']} since step {r['first_step']}, confidence {r['confidence']:.2f})" for r in rows]
    return answer("\n".join(lines) or f"no leak in {path} (verdict: {model['verdict']})", {"verdict": model["verdict"], "leaks": rows})


def owners(path: str) -> CallToolResult:
    """Who holds each leak: the paths from a module global, a frame's local or a class attribute to
    the leaked tensor, found by a live capture (`vramscope run`, `vramscope.track()`) and joined from
    TRACE.owners.json. A snapshot has none: only the live process could be searched."""
    _, model = findings(path)
    rows = [{"site": leak["site"], "bytes_per_step": leak["bytes_per_step"], "owners": leak.get("owners", []),
             "owners_found_at_step": leak.get("owners_found_at_step")}
            for run in runs_of(model) for leak in run["leaks"]]
    lines = []
    for row in rows:
        lines.append(f"{where(row['site'])}  ({rate(row['bytes_per_step'])})")
        lines += [f"  held by {o['path']}  → {o['target']}" for o in row["owners"]]
        if not row["owners"]:
            lines.append("  held by: not known (owners are found by a live capture: vramscope run, track())")
    return answer("\n".join(lines) or f"no leak in {path}, so no owner to find", {"leaks": rows})


def peak(path: str) -> CallToolResult:
    """Each device's highest moment of allocated memory: when it fell (step, phase), every byte live
    then in one category (parameters, gradients, optimizer state, activations, temporaries, leaks,
    before the trace, other), and its largest allocation sites."""
    _, model = findings(path)
    peaks = [{"source": run["source"], **p} for run in runs_of(model) for p in run.get("peak", [])]
    lines = []
    for p in peaks:
        parts = ", ".join(f"{c['category']} {_core.format_bytes(c['bytes'])}" for c in p["categories"] if c["bytes"])
        lines.append(f"cuda:{p['device']} {_core.format_bytes(p['bytes'])} allocated at step {p['step']}, "
                     f"{p['phase']}: {parts}")
        lines += [f"  {_core.format_bytes(s['bytes'])} {s['category']} at {where(s['site'])}" for s in p["sites"]]
    return answer("\n".join(lines) or f"{path} holds no peak (no memory event)", {"peak": peaks})


def diff(path: str, other: str) -> CallToolResult:
    """Two runs side by side (`vramscope diff`): `path` is A, `other` is B, each a trace, snapshot or
    findings JSON of one run. Their peaks by category and site, and each leak gone, new or changed."""
    try:
        text, table = _core.diff_texts(os.fspath(path), os.fspath(other))
    except INPUT_ERRORS as e:
        raise ToolError(f"vramscope: {e}") from None
    return answer(text, json.loads(table))


def compare_table(path: str) -> CallToolResult:
    """The table of a `vramscope compare` run, `path` its OUT/compare.json: per mode each row's verdict,
    leak rate, peak and status against the baseline (root-cause fix, partial, no effect, worse,
    broken), and which rows remove each leak."""
    try:
        text, table = _core.compare_table_texts(os.fspath(path))
    except INPUT_ERRORS as e:
        raise ToolError(f"vramscope: {e}") from None
    return answer(text, json.loads(table))


TOOLS = (analyze, leaks, owners, peak, diff, compare_table)


def server() -> MCPServer:
    mcp = MCPServer("vramscope", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    for tool in TOOLS:
        mcp.add_tool(tool, description=inspect.cleandoc(tool.__doc__ or ""))
    return mcp


def serve() -> None:
    """The server on stdin and stdout, until the client closes them."""
    server().run("stdio")
