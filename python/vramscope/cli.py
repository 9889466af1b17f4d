"""The `vramscope` command: the C++ core does the work; Python finds bundled data and launches runs."""

from __future__ import annotations

import sys
from pathlib import Path

from ._core import cli_main

DEMO_TRACE = Path(__file__).parent / "data" / "leak_offload_stream.pickle.gz"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["run"]:
        from .launch import run

        return run(args[1:])
    if args[:1] == ["compare"]:
        from .compare import main as compare

        return compare(args[1:])
    try:
        if args[:1] == ["demo"]:
            print(
                "vramscope demo: a real torch memory snapshot, recorded on an 80 GB H100, of a training loop\n"
                "whose saved-tensors hook stashes activations on a side stream and never clears them (the\n"
                "TRL OffloadActivations leak). Your own: vramscope analyze snapshot.pickle\n",
                flush=True,
            )
            # The snapshot does not say how large the GPU was; the recording run did (81,559 MiB).
            args = ["analyze", str(DEMO_TRACE), "--device-memory", "81559MiB", *args[1:]]
        sys.stdout.flush()
    except OSError as e:  # stdout full or closed: as the C++ core says it, exit 2
        print(f"vramscope: error: stdout: {e.strerror}", file=sys.stderr)
        return 2
    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
