"""Instructions and data accesses per allocate+free triple, by sink, counted by callgrind inside the
pump's calls only: what a sink runs on the allocating thread (not a drain, which runs there only
when the worker is late or at close), machine-independent, so a change to the hook's path can be
weighed without a GPU and beside the floor of a recorder (capture_overhead.py's FLOOR_SINK). Each sink is pumped 0 and N triples in fresh processes under
`--depth` Python frames (recorder_cost.py's pump), `--evict-kib` written between triples; the
difference over N is one triple's, and the pump's own (sink "none") is taken off the others'.
"L1 lines missed": the lines a triple must fetch again after the step's work (the issue's "cache
lines per event").

  python bench/sink_instructions.py --triples 20000 [--sinks vramscope hook-to-floor ...]

Child mode (what callgrind runs): python bench/sink_instructions.py --pump SINK N
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_overhead import FLOORS, floor_sinks  # noqa: E402
from recorder_cost import deep, pump_library  # noqa: E402

EVENTS = ("Ir", "Dr", "Dw", "D1mr", "D1mw")


def pump(sink: str, triples: int, depth: int, evict_kib: int) -> None:
    from vramscope import _core

    library = pump_library()
    kind = _core.EventKind
    kinds = [int(kind.alloc.value), int(kind.free_requested.value), int(kind.free_completed.value)]
    recorder = _core.Recorder(os.path.join(tempfile.mkdtemp(), "instructions.vscope"))
    recorder.activate()
    recorder.set_python_stacks(sink != "vramscope-no-stacks")
    address = (library.none_sink() if sink == "none" else _core.allocator_sink() if sink.startswith("vramscope")
               else floor_sinks()[sink])
    whole, evict = ctypes.c_uint64(), ctypes.create_string_buffer(max(1, evict_kib * 1024))
    run = lambda n: deep(depth, lambda: library.pump(address, n, *kinds, evict, evict_kib * 1024, ctypes.byref(whole)))
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


def counted(sink: str, triples: int, depth: int, evict_kib: int, out: str) -> dict[str, int]:
    """The totals inside ctypes' calls: the pump's two (callgrind names the pump itself as part of libffi)."""
    stem = os.path.join(out, f"{sink}-{triples}")
    env = dict(os.environ, PYTHONHASHSEED="0")  # the interpreter's own work alike in both runs
    subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=_ctypes_callproc", "--cache-sim=yes", f"--callgrind-out-file={stem}",
                    os.path.realpath(sys.executable), __file__, "--pump", sink, str(triples), "--depth", str(depth),
                    "--evict-kib", str(evict_kib)],
                   env=env, check=True, capture_output=True)
    return totals(stem)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--triples", type=int, default=20000)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--evict-kib", type=int, default=64,
                    help="memory written between triples, as a step's work leaves the caches (callgrind's L1 is 32 KiB)")
    ap.add_argument("--sinks", nargs="+", default=["vramscope", "vramscope-no-stacks", *FLOORS],
                    choices=["none", "vramscope", "vramscope-no-stacks", *FLOORS])
    ap.add_argument("--pump", nargs=2, metavar=("SINK", "TRIPLES"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.pump:
        pump(a.pump[0], int(a.pump[1]), a.depth, a.evict_kib)
        return 0
    sinks = ["none", *(s for s in a.sinks if s != "none")]  # the pump's own, taken off the others
    per: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as out:
        for sink in sinks:
            before, after = (counted(sink, n, a.depth, a.evict_kib, out) for n in (0, a.triples))
            per[sink] = {e: (after[e] - before[e]) / a.triples for e in EVENTS}
            own = {e: per[sink][e] - (per["none"][e] if sink != "none" else 0) for e in EVENTS}
            print(f"{sink:30s} per triple{' (the pump alone)' if sink == 'none' else ''}: "
                  f"instructions {own['Ir']:.0f}, reads {own['Dr']:.0f}, writes {own['Dw']:.0f}, "
                  f"L1 lines missed {own['D1mr'] + own['D1mw']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
