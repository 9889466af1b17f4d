"""`vramscope demo`: the analysis of a bundled real trace of a leaking training run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import _core
from .core import add_core_options, typed

NAME = "demo"
HELP = "Analyse a bundled real trace of a leaking training run (analyze's options apply)."
TRACE = Path(__file__).parent.parent / "data" / "leak_offload_stream.pickle.gz"
# The snapshot does not say how large the GPU was; the recording run did (81,559 MiB).
RECORDED_ON = ("--device-memory", "81559MiB")


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    add_core_options(parser, "analyze", leave_out={"--skip-empty"})


def run(args: argparse.Namespace) -> int:
    # On stderr: stdout is the analysis alone (`demo --json -` is JSON).
    print("vramscope demo: a real torch memory snapshot, recorded on an 80 GB H100, of a training loop\n"
          "whose saved-tensors hook stashes activations on a side stream and never clears them (the\n"
          "TRL OffloadActivations leak), analysed with --device-memory 81559MiB, that GPU's size, which\n"
          "a snapshot does not hold. Your own: vramscope analyze snapshot.pickle --device-memory 80GiB\n",
          file=sys.stderr, flush=True)
    if not any(name == RECORDED_ON[0] for name, _ in args.given):
        args.given = [RECORDED_ON, *args.given]
    return _core.run_command("analyze", [str(TRACE)], typed("analyze", args))
