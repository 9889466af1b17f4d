"""`vramscope compare`: candidate fixes × modes, each cell a fresh process under live capture; the
table (statuses from the measurements against the baseline) is the C++ core's `compare-table`.
docs/compare.md."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from .. import _core
from .matrix import ALL, Cell, Matrix, MatrixError, flag_spec, from_dict, merge_flags, read
from .outputs import OutputError, refuse_inside, refuse_overwriting, write_atomic
from .runner import NOT_RUN, Options, Runner, cell_dir, shown, visible_gpus


class Progress:
    """Cells done, running and queued: one line rewritten on a terminal, a line per cell otherwise."""

    def __init__(self, stream: TextIO = sys.stderr):
        self.stream = stream
        self.tty = stream.isatty()
        self.last = ""
        self.t0 = time.monotonic()

    def show(self, counts: dict[str, Any], final: bool = False) -> None:
        line = (f"vramscope compare: {counts['done']}/{counts['total']} cells done, {counts['running']} running, "
                f"{counts['queued']} queued  ({time.monotonic() - self.t0:,.0f} s)")
        if self.tty and (line != self.last or final):
            self.stream.write("\r" + line + ("\n" if final else ""))
            self.stream.flush()
        self.last = line

    def note(self, text: str) -> None:
        """A line of the run; what the matrix or a cell said in it is shown escaped, never obeyed."""
        self.stream.write(("\n" if self.tty else "") + f"vramscope compare: {_core.terminal_safe(text)}\n")
        self.stream.flush()

    def cell_done(self, cell: Cell, result: dict[str, Any]) -> None:
        why = f" ({result['reason']})" if result.get("reason") else ""
        self.note(f"{cell.key}: {result['state']} in {result['wall_seconds']:,.1f} s{why}")


def matrix_of(args: argparse.Namespace) -> tuple[Matrix, Options]:
    """The matrix (the file's, with the flags over it) and how to run it; MatrixError says what is wrong."""
    spec: dict[str, Any] = {}
    for kind in ("variant", "mode"):
        for text in getattr(args, kind):
            flag_spec(spec, kind, text)
    for key in ("max_steps", "timeout", "device_memory"):  # checked with the file's values, by one rule
        if getattr(args, key) is not None:
            spec[key] = getattr(args, key)
    if args.matrix is not None:
        table = read(args.matrix)
        try:
            matrix = from_dict(merge_flags(table, spec), Path(args.matrix).parent.resolve(), args.command or None)
        except MatrixError as e:
            raise MatrixError(f"{args.matrix}: {e}") from None
        matrix.source = args.matrix
    else:
        matrix = from_dict(spec, Path.cwd(), args.command or None)
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else None
    slots: list[str | None] = [None] * args.jobs if args.launcher else (gpus or visible_gpus())
    launcher = args.launcher.split() if args.launcher else []
    return matrix, Options(Path(args.output).absolute(), slots, launcher, args.resume, args.keep_trees)


def results(matrix: Matrix, runner: Runner, wall_seconds: float, complete: bool) -> dict[str, Any]:
    """compare.json: what compare-table reads (cells in matrix order, paths relative to it)."""
    cells = []
    for cell in matrix.cells():
        r = runner.results.get(cell.key) or {"mode": cell.mode.name, "variant": cell.variant.name, "state": "not-run",
                                             "reason": "not started (interrupted)"}
        base = f"cells/{cell.mode.name}/{cell.variant.name}/"
        cells.append({**r, **{k: base + r[k] for k in ("findings", "report", "log") if r.get(k)}})
    return {"schema": "vramscope.compare", "schema_version": 1, "command": matrix.command, "steps": matrix.max_steps,
            "timeout_seconds": matrix.timeout, "gpus": runner.options.gpus, "complete": complete,
            "wall_seconds": round(wall_seconds, 3), "modes": [m.name for m in matrix.modes],
            "rows": [{"name": v.name, "label": v.label, "changes": v.describe()} for v in matrix.rows()],
            "cells": cells}


def prepare_outputs(matrix: Matrix, out: Path, table: _core.CommandOptions) -> Path:
    """OUT made (with OUT/cells); no file the run will write (compare.json, the table's, by option)
    may be one of its inputs or lie where the run replaces cells. Returns compare.json's path;
    `table` (compare-table's options) gains its defaults. Raises OutputError saying which."""
    table.markdown = table.markdown or str(out / "compare.md")
    table.html = table.html or str(out / "compare.html")
    summary = out / "compare.json"
    files: dict[str, str | Path] = {"compare.json": summary, "--markdown": table.markdown, "--html": table.html,
             **({"--json": table.json} if table.json and table.json != "-" else {})}
    refuse_overwriting(files, matrix.inputs())
    refuse_inside(out / "cells", [*matrix.inputs(), *matrix.trees()])
    try:
        (out / "cells").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"-o {out}: cannot make the output folder: {e.strerror or e}") from None
    return summary


def main(args: argparse.Namespace) -> int:
    """`vramscope compare` with its arguments parsed (commands/compare.py)."""
    table = _core.parse_options("compare-table", args.given)  # the table's outputs, typed by the core
    try:
        matrix, options = matrix_of(args)
        summary = prepare_outputs(matrix, options.out, table)
    except (MatrixError, OutputError) as e:
        print(f"vramscope compare: {_core.terminal_safe(str(e))}\nTry 'vramscope compare --help'.", file=sys.stderr)
        return 2
    progress = Progress()
    why_no_all = matrix.why_no_all()
    if why_no_all:
        progress.note(f"no `{ALL}` row: {why_no_all}")
    runner = Runner(matrix, options)
    t0 = time.monotonic()
    complete = runner.run(progress)
    try:
        write_atomic(summary, json.dumps(results(matrix, runner, time.monotonic() - t0, complete), indent=1) + "\n")
    except OSError as e:
        print(f"vramscope compare: {summary}: cannot write the results: {e.strerror or e}", file=sys.stderr)
        return 2
    broke = runner.halted or runner.alike_before_any_step(matrix.cells())
    if complete and broke:
        first = cell_dir(options.out, matrix.cells()[0]) / "log.txt"
        skipped = sum(1 for r in runner.results.values() if r.get("state") == NOT_RUN)
        rest = f"; the other {skipped} {'cell was' if skipped == 1 else 'cells were'} not run" if skipped else ""
        progress.note(f"every cell broke the same way before its first step, so nothing can be compared: {broke}. "
                      f"See {shown(first)}{rest}. Fix it and run compare again.")
        return 2
    sys.stdout.flush()
    rc = _core.run_command("compare-table", [str(summary)], table)
    return 130 if not complete else rc
