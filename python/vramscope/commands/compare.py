"""`vramscope compare`: candidate fixes × modes, each cell a fresh process under live capture
(compare/, docs/compare.md)."""

from __future__ import annotations

import argparse
from typing import Callable

from ..compare.matrix import MAX_JOBS, MatrixError, whole_number
from .core import add_core_options
from .run import add_max_steps

NAME = "compare"
HELP = """Which candidate fix removes the leak, in each mode: one table of fresh runs. Runs COMMAND
once per mode for the baseline, each variant and all variants together, each in a fresh process
under live capture. MATRIX.toml holds the same as the flags (docs/compare.md); flags add to it.
Exit: 0 when the table was written (whatever the cells found), 2 on a bad matrix or when every
cell breaks the same way before its first step (the rest are then not run), 130 on Ctrl-C."""
USAGE = "%(prog)s [MATRIX.toml] [options] [-- COMMAND...]"
TAKES_COMMAND = True


def _text(what: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if not text:
            raise argparse.ArgumentTypeError(f"{what} needs a value, not ''")
        return text
    return check


def _jobs(text: str) -> int:
    try:
        jobs = whole_number(text, "--jobs", MAX_JOBS)
    except MatrixError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if jobs < 1:
        raise argparse.ArgumentTypeError("--jobs: at least 1 cell at a time")
    return jobs


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.usage = USAGE
    parser.add_argument("matrix", nargs="?", metavar="MATRIX.toml")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=KIND:VALUE",
                        help="KIND: patch (a diff, applied to a copy), preload (a module or .py imported first), "
                             "env (KEY=VALUE), args, ref (a git ref), tree (what the patches apply to), label; "
                             "repeat NAME to add to it")
    parser.add_argument("--mode", action="append", default=[], metavar="NAME=ARGS",
                        help="arguments appended to COMMAND in this mode (or NAME=env:KEY=VALUE)")
    add_max_steps(parser, default=None)
    parser.add_argument("--timeout", metavar="T", help="per cell (600, 90s, 20m; default 30m); then SIGTERM, "
                                                        "SIGKILL after 20 s")
    # analyze's --device-memory, by its rule (the matrix's device_memory goes through it too)
    add_core_options(parser, "analyze", only={"--device-memory"})
    parser.set_defaults(device_memory=None)
    parser.add_argument("-o", "--output", type=_text("-o"), default="vramscope-compare", metavar="OUT",
                        help="output folder (default vramscope-compare): per cell its trace, log, findings and "
                             "report; compare.json, compare.md, compare.html")
    parser.add_argument("--resume", action="store_true", help="keep cells finished with the same settings; run the rest")
    parser.add_argument("--gpus", type=_text("--gpus"), metavar="LIST",
                        help="GPUs to spread cells over, one per cell (default: all visible)")
    parser.add_argument("--launcher", type=_text("--launcher"), metavar="PREFIX",
                        help="a prefix for each cell (cluster launchers); --jobs cells at once")
    parser.add_argument("--jobs", type=_jobs, default=1, metavar="N", help="cells at once under --launcher")
    parser.add_argument("--keep-trees", action="store_true",
                        help="keep each cell's patched copies (default: removed after the cell)")
    add_core_options(parser, "compare-table")
    parser.set_defaults(command=[])  # after `--` only: a word after MATRIX.toml is no command


def run(args: argparse.Namespace) -> int:
    from ..compare import main

    # --device-memory's text is the matrix's device_memory; the table's options stay in args.given.
    sizes = [v for name, v in args.given if name == "--device-memory"]
    args.given = [(name, v) for name, v in args.given if name != "--device-memory"]
    args.device_memory = sizes[-1] if sizes else None
    return main(args)
