"""The recorder's cost per event without a GPU: allocate+free triples (alloc, free_requested,
free_completed, as torch's allocator sends them) fed to an active Recorder through the hook's own
C entry point, from a C loop (compiled on first use, called through ctypes with the GIL released,
as torch calls the hook) under 20 Python frames, so each allocation walks and finds its stack.
Prints the median ns per triple over --repeats. `--depth` sets the Python frames above the loop.

  python bench/recorder_cost.py --pairs 1000000 --repeats 5
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time

PUMP = r"""
#include <stdint.h>
typedef void (*sink_fn)(int, int, uint64_t, uint64_t, uint64_t, const char*);
void pump(uint64_t sink, int64_t n, int alloc, int requested, int completed) {
    sink_fn f = (sink_fn)(uintptr_t)sink;
    for (int64_t i = 0; i < n; ++i) {
        uint64_t addr = 0x10000000ull + (uint64_t)(i & 63) * 4096;
        f(alloc, 0, addr, 4096, 7, 0);
        f(requested, 0, addr, 4096, 7, 0);
        f(completed, 0, addr, 4096, 7, 0);
    }
}
"""


def pump_library() -> ctypes.CDLL:
    build = os.path.join(tempfile.gettempdir(), f"vramscope_pump_{os.getuid()}")
    os.makedirs(build, exist_ok=True)
    source, lib = os.path.join(build, "pump.c"), os.path.join(build, "pump.so")
    with open(source, "w") as f:
        f.write(PUMP)
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", lib, source], check=True)
    return ctypes.CDLL(lib)


def deep(depth: int, fn):
    return deep(depth - 1, fn) if depth else fn()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--depth", type=int, default=20)
    a = ap.parse_args()
    from vramscope import _core

    pump = pump_library().pump
    pump.argtypes = [ctypes.c_uint64, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    kind = _core.EventKind
    kinds = [int(kind.alloc.value), int(kind.free_requested.value), int(kind.free_completed.value)]
    sink = _core.allocator_sink()

    def loop(n: int) -> float:
        t0 = time.perf_counter()
        pump(sink, n, *kinds)
        return 1e9 * (time.perf_counter() - t0) / n

    recorder = _core.Recorder(os.path.join(tempfile.mkdtemp(), "cost.vscope"))
    recorder.activate()
    deep(a.depth, lambda: loop(a.pairs // 10))  # warm: the stack is interned once
    ns = [deep(a.depth, lambda: loop(a.pairs)) for _ in range(a.repeats)]
    recorder.deactivate()
    recorder.close()
    print(f"{statistics.median(ns):.0f} ns per allocate+free (3 events; median of {a.repeats}, "
          f"range {min(ns):.0f}..{max(ns):.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
