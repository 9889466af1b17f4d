"""`vramscope compare`: candidate fixes × modes, each cell a fresh process under live capture; the
table (statuses from the measurements against the baseline) is the C++ core's `compare-table`.
docs/compare.md."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from .. import _core
from .matrix import ALL, MAX_JOBS, Matrix, MatrixError, flag_spec, from_dict, merge_flags, read, whole_number
from .outputs import OutputError, refuse_inside, refuse_overwriting, write_atomic
from .runner import Options, Runner, visible_gpus

USAGE = """usage: vramscope compare [MATRIX.toml] [--variant NAME=KIND:VALUE]... [--mode NAME=ARGS]...
                         [--steps N] [--timeout T] [--device-memory SIZE] [-o OUT] [--resume]
                         [--gpus 0,1,...] [--launcher "srun ..." [--jobs N]] [--keep-trees]
                         [--markdown FILE] [--json FILE] [--html FILE] [-- COMMAND...]

  Runs COMMAND once per mode for the baseline, each variant and all variants together, each in
  a fresh process under live capture, and prints which variant fixes the leak.
  --variant NAME=KIND:VALUE   KIND: patch (a diff, applied to a copy), preload (a module or .py
                              imported first), env (KEY=VALUE), args, ref (a git ref), tree (what
                              the patches apply to), label; repeat NAME to add to it
  --mode NAME=ARGS            arguments appended to COMMAND in this mode (or NAME=env:KEY=VALUE)
  --steps N                   stop each cell after N optimizer steps (exit 0)
  --timeout T                 per cell (600, 90s, 20m; default 30m); then SIGTERM, SIGKILL after 20 s
  -o OUT                      output folder (default vramscope-compare): per cell its trace, log,
                              findings and report; compare.json, compare.md, compare.html
  --resume                    keep cells finished with the same settings; run the rest
  --gpus LIST                 GPUs to spread cells over, one per cell (default: all visible)
  --launcher PREFIX           a prefix for each cell (cluster launchers); --jobs cells at once
  --keep-trees                keep each cell's patched copies (default: removed after the cell)
Exit: 0 when the table was written (whatever the cells found), 2 on a bad matrix, 130 on Ctrl-C.
"""


class Progress:
    """Cells done, running and queued: one line rewritten on a terminal, a line per cell otherwise."""

    def __init__(self, stream=sys.stderr):
        self.stream = stream
        self.tty = stream.isatty()
        self.last = ""
        self.t0 = time.monotonic()

    def show(self, counts: dict, final: bool = False) -> None:
        line = (f"vramscope compare: {counts['done']}/{counts['total']} cells done, {counts['running']} running, "
                f"{counts['queued']} queued  ({time.monotonic() - self.t0:,.0f} s)")
        if self.tty and (line != self.last or final):
            self.stream.write("\r" + line + ("\n" if final else ""))
            self.stream.flush()
        self.last = line

    def note(self, text: str) -> None:
        self.stream.write(("\n" if self.tty else "") + f"vramscope compare: {text}\n")
        self.stream.flush()

    def cell_done(self, cell, result: dict) -> None:
        why = f" ({result['reason']})" if result.get("reason") else ""
        self.note(f"{cell.key}: {result['state']} in {result['wall_seconds']:,.1f} s{why}")


def parse(args: list[str]) -> tuple[Matrix, Options, dict]:
    spec: dict = {}
    matrix_file, command, outputs = None, None, {}
    out, resume, keep_trees, gpus, launcher, jobs = "vramscope-compare", False, False, None, [], 1
    values = {"--variant", "--mode", "--steps", "--timeout", "--device-memory", "-o", "--output", "--gpus",
              "--launcher", "--jobs", "--markdown", "--json", "--html"}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            command = args[i + 1:]
            break
        if a in ("-h", "--help"):
            print(USAGE)
            raise SystemExit(0)
        if a in values:
            if i + 1 >= len(args):
                raise MatrixError(f"{a} needs a value")
            v = args[i + 1]
            i += 2
            if not v:
                raise MatrixError(f"{a} needs a value, not ''")
            if a in ("--variant", "--mode"):
                flag_spec(spec, a[2:], v)
            elif a in ("--steps", "--timeout", "--device-memory"):  # checked with the file's values
                spec[a[2:].replace("-", "_")] = v
            elif a in ("-o", "--output"):
                out = v
            elif a == "--gpus":
                gpus = [g.strip() for g in v.split(",") if g.strip()]
            elif a == "--launcher":
                launcher = v.split()
            elif a == "--jobs":
                jobs = whole_number(v, "--jobs", MAX_JOBS)
                if jobs < 1:
                    raise MatrixError("--jobs: at least 1 cell at a time")
            else:
                outputs[a[2:]] = v
            continue
        if a == "--resume":
            resume = True
        elif a == "--keep-trees":
            keep_trees = True
        elif a.startswith("-") or matrix_file is not None:
            raise MatrixError(f"unknown argument {a}")
        else:
            matrix_file = a
        i += 1
    if matrix_file is not None:
        table = read(matrix_file)
        try:
            matrix = from_dict(merge_flags(table, spec), Path(matrix_file).parent.resolve(), command)
        except MatrixError as e:
            raise MatrixError(f"{matrix_file}: {e}") from None
        matrix.source = matrix_file
    else:
        matrix = from_dict(spec, Path.cwd(), command)
    slots = [None] * jobs if launcher else (gpus or visible_gpus())
    return matrix, Options(Path(out).absolute(), slots, launcher, resume, keep_trees), outputs


def results(matrix: Matrix, runner: Runner, wall_seconds: float, complete: bool) -> dict:
    """compare.json: what compare-table reads (cells in matrix order, paths relative to it)."""
    cells = []
    for cell in matrix.cells():
        r = runner.results.get(cell.key) or {"mode": cell.mode.name, "variant": cell.variant.name, "state": "not-run",
                                             "reason": "not started (interrupted)"}
        base = f"cells/{cell.mode.name}/{cell.variant.name}/"
        cells.append({**r, **{k: base + r[k] for k in ("findings", "report", "log") if r.get(k)}})
    return {"schema": "vramscope.compare", "schema_version": 1, "command": matrix.command, "steps": matrix.steps,
            "timeout_seconds": matrix.timeout, "gpus": runner.options.gpus, "complete": complete,
            "wall_seconds": round(wall_seconds, 3), "modes": [m.name for m in matrix.modes],
            "rows": [{"name": v.name, "label": v.label, "changes": v.describe()} for v in matrix.rows()],
            "cells": cells}


def prepare_outputs(matrix: Matrix, out: Path, outputs: dict) -> dict[str, Path]:
    """OUT made (with OUT/cells) and every file the run will write, by option: none may be one of
    its inputs or lie where the run replaces cells. Raises OutputError saying which."""
    files = {"compare.json": out / "compare.json",
             "--markdown": Path(outputs.get("markdown", out / "compare.md")),
             "--html": Path(outputs.get("html", out / "compare.html"))}
    if "json" in outputs:
        files["--json"] = Path(outputs["json"])
    refuse_overwriting(files, matrix.inputs())
    refuse_inside(out / "cells", [*matrix.inputs(), *matrix.trees()])
    try:
        (out / "cells").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"-o {out}: cannot make the output folder: {e.strerror or e}") from None
    return files


def main(args: list[str]) -> int:
    try:
        matrix, options, outputs = parse(args)
    except MatrixError as e:
        print(f"vramscope compare: {e}\n\n{USAGE}", file=sys.stderr)
        return 2
    try:
        files = prepare_outputs(matrix, options.out, outputs)
    except OutputError as e:
        print(f"vramscope compare: {e}", file=sys.stderr)
        return 2
    progress = Progress()
    why_no_all = matrix.why_no_all()
    if why_no_all:
        progress.note(f"no `{ALL}` row: {why_no_all}")
    runner = Runner(matrix, options)
    t0 = time.monotonic()
    complete = runner.run(progress)
    summary = files["compare.json"]
    try:
        write_atomic(summary, json.dumps(results(matrix, runner, time.monotonic() - t0, complete), indent=1) + "\n")
    except OSError as e:
        print(f"vramscope compare: {summary}: cannot write the results: {e.strerror or e}", file=sys.stderr)
        return 2
    table = ["compare-table", str(summary), "--markdown", str(files["--markdown"]), "--html", str(files["--html"])]
    if "--json" in files:
        table += ["--json", str(files["--json"])]
    sys.stdout.flush()
    rc = _core.cli_main(table)
    return 130 if not complete else rc
