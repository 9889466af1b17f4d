"""Instructions and data accesses per allocate+free triple, by sink, counted by callgrind: what a
sink runs on the allocating thread (and, for vramscope, on its worker), machine-independent, so a
change to the hook's path can be weighed without a GPU and beside the floor of a recorder
(capture_overhead.py's FLOOR_SINK). Each sink is pumped 0 and N triples in fresh processes under
`--depth` Python frames (recorder_cost.py's pump); the difference over N is one triple's.

  python bench/sink_instructions.py --triples 20000 [--sinks vramscope hook-to-floor ...]

Child mode (what callgrind runs): python bench/sink_instructions.py --pump SINK N
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_overhead import FLOORS, floor_sinks  # noqa: E402
from recorder_cost import deep, pump_library  # noqa: E402

EVENTS = ("Ir", "Dr", "Dw")


def pump(sink: str, triples: int, depth: int) -> None:
    from vramscope import _core

    library = pump_library()
    kind = _core.EventKind
    kinds = [int(kind.alloc.value), int(kind.free_requested.value), int(kind.free_completed.value)]
    recorder = _core.Recorder(os.path.join(tempfile.mkdtemp(), "instructions.vscope"))
    recorder.activate()
    address = (library.none_sink() if sink == "none" else _core.allocator_sink() if sink == "vramscope"
               else floor_sinks()[sink])
    whole, nothing = ctypes.c_uint64(), ctypes.create_string_buffer(1)
    run = lambda n: deep(depth, lambda: library.pump(address, n, *kinds, nothing, 0, ctypes.byref(whole)))
    run(1000)  # warm: vramscope's stack is met once, the floors' buffers allocated
    run(triples)
    recorder.deactivate()
    recorder.close()


def totals(path: str) -> dict[str, int]:
    events = []
    with open(path) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("totals:"):
                return dict(zip(events, map(int, line.split()[1:])))
    raise RuntimeError(f"{path}: no totals (did callgrind run?)")


def counted(sink: str, triples: int, depth: int, out: str) -> list[dict[str, int]]:
    """Each thread's totals, callgrind's thread order (the pumping thread first)."""
    stem = os.path.join(out, f"{sink}-{triples}")
    env = dict(os.environ, PYTHONHASHSEED="0")  # the interpreter's own work alike in both runs
    subprocess.run(["valgrind", "--tool=callgrind", "--separate-threads=yes", "--cache-sim=yes", f"--callgrind-out-file={stem}",
                    os.path.realpath(sys.executable), __file__, "--pump", sink, str(triples), "--depth", str(depth)],
                   env=env, check=True, capture_output=True)
    return [totals(p) for p in sorted(glob.glob(stem + "-*"))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--triples", type=int, default=20000)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--sinks", nargs="+", default=["none", "vramscope", *FLOORS],
                    choices=["none", "vramscope", *FLOORS])
    ap.add_argument("--pump", nargs=2, metavar=("SINK", "TRIPLES"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.pump:
        pump(a.pump[0], int(a.pump[1]), a.depth)
        return 0
    with tempfile.TemporaryDirectory() as out:
        for sink in a.sinks:
            before, after = counted(sink, 0, a.depth, out), counted(sink, a.triples, a.depth, out)
            per = [{e: (t[e] - b[e]) / a.triples for e in EVENTS} for b, t in zip(before, after)]
            threads = "; ".join(("allocating thread" if i == 0 else f"thread {i + 1}") + ": " +
                                " ".join(f"{e} {p[e]:.0f}" for e in EVENTS) for i, p in enumerate(per))
            print(f"{sink:30s} per triple, {threads}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
