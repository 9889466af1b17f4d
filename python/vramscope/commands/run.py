"""`vramscope run -- COMMAND`: capture a training command with no change to its code (launch.py)."""

from __future__ import annotations

import argparse
import sys

from ..compare.matrix import MAX_STEPS, MatrixError, whole_number
from ..capture.armed import DEFAULT_STEPS
from .core import add_core_options, typed

NAME = "run"
HELP = """Run a training command under live capture, with no code change. Warns as soon as a leak is
confirmed, and analyses the traces when it ends (analyze's options apply to that analysis).
COMMAND: python train.py ..., torchrun ..., or a script.py. Each process that uses CUDA writes
OUT (default vramscope.vscope; under torchrun each rank OUT with .rankN in its name); the report
page goes to OUT.html (--html to choose). The command's own failure code wins over --fail-on-leak.
With --armed each process records nothing until `vramscope attach PID` (or SIGUSR2) asks, then its
next --steps-after-attach steps, which it analyses and reports itself (OUT.attachK.vscope)."""
TAKES_COMMAND = True


def max_steps(text: str) -> int:
    """--max-steps: the one rule, as the compare matrix's max_steps."""
    try:
        return whole_number(text, "--max-steps", MAX_STEPS)
    except MatrixError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def steps_after_attach(text: str) -> int:
    steps = max_steps(text)
    if steps == 0:
        raise argparse.ArgumentTypeError("--steps-after-attach must be at least 1")
    return steps


def add_max_steps(parser: argparse.ArgumentParser, default: int | None = 0) -> None:
    parser.add_argument("--max-steps", type=max_steps, default=default, metavar="N",
                        help="end each process cleanly (exit 0) after N steps (its trace complete)")


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", default="vramscope.vscope", metavar="OUT.vscope",
                        help="the trace each process writes (default vramscope.vscope)")
    add_max_steps(parser)
    parser.add_argument("--armed", action="store_true",
                        help="record nothing until attached (vramscope attach PID, or SIGUSR2), for runs of days")
    parser.add_argument("--steps-after-attach", type=steps_after_attach, default=DEFAULT_STEPS, metavar="N",
                        help=f"with --armed: the steps each attach records (default {DEFAULT_STEPS})")
    add_core_options(parser, "analyze", leave_out={"--skip-empty"})
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND...")


def run(args: argparse.Namespace) -> int:
    from ..launch import run as launch

    if args.armed and args.max_steps:
        print("vramscope run: --max-steps counts the steps a capture records, and an armed run records none until "
              "attached: give one or the other", file=sys.stderr)
        return 2
    options = typed("analyze", args)  # checked before the command starts, not after it ran for hours
    return launch(args.command, args.output, args.max_steps, options,
                  armed=args.steps_after_attach if args.armed else 0)
