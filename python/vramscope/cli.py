"""The `vramscope` command: the C++ core does the work; Python finds bundled data and launches runs."""

from __future__ import annotations

import sys
from pathlib import Path

from ._core import cli_main

DEMO_TRACE = Path(__file__).parent / "data" / "leak_offload_stream.pickle.gz"


def report_from_findings(args: list[str]) -> int:
    """`vramscope report findings.json -o report.html`: the page around findings already made."""
    import json

    from . import __version__, _core

    out, inputs = None, []
    it = iter(args)
    for a in it:
        if a in ("-o", "--output"):
            out = next(it, None)
        else:
            inputs.append(a)
    if not out or not inputs or not all(i.endswith(".json") for i in inputs):
        print("vramscope report: findings JSON input takes FILE.json... -o OUT.html (not mixed with traces)",
              file=sys.stderr)
        return 2
    runs, ranks = [], None
    for path in inputs:
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            print(f"vramscope report: {path}: not a findings JSON ({e})", file=sys.stderr)
            return 2
        runs += doc.get("runs", [doc])
        ranks = ranks or doc.get("ranks")
    data = {"generator": f"vramscope {__version__}", "runs": runs, "ranks": ranks, "owners": [None] * len(runs)}
    Path(out).write_text(_core.report_page(json.dumps(data)))
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["run"]:
        from .launch import run

        return run(args[1:])
    if args[:1] == ["report"] and any(a.endswith(".json") for a in args[1:]):
        return report_from_findings(args[1:])
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
    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
