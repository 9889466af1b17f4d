"""The recorder's cost per event without a GPU: allocate+free triples (alloc, free_requested,
free_completed, as torch's allocator sends them) fed to an active Recorder through the hook's own
C entry point, from a C loop (compiled on first use, called through ctypes with the GIL released,
as torch calls the hook) under 20 Python frames, so each allocation walks and finds its stack.
Prints the median ns per triple over --repeats, timed around the calls alone and less the same
calls' time to a sink that does nothing (with --evict-kib: what the hook costs once its lines have
left the caches, and how much longer the writes between triples take beside the recorder: its
lines evicting theirs, its worker's draining), and how many of the allocations pumped the
trace holds (none may be lost, at any rate). `--depth` sets the Python frames above the loop.

  python bench/recorder_cost.py --pairs 1000000 --repeats 5
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import tempfile
import time

from c_library import c_library

PUMP = r"""
#include <stdint.h>
typedef void (*sink_fn)(int, int, uint64_t, uint64_t, uint64_t, const char*);
void none(int kind, int device, uint64_t addr, uint64_t size, uint64_t stream, const char* node) {}
uint64_t none_sink(void) { return (uint64_t)(uintptr_t)&none; }
#if defined(__x86_64__)
#include <x86intrin.h>
static uint64_t ticks(void) { return __rdtsc(); }
#else
#include <time.h>
static uint64_t ticks(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000ull + t.tv_nsec; }
#endif
uint64_t now_ticks(void) { return ticks(); }
/* Between triples, every line of `evict` is written: what a training step does between two
   allocations (launching kernels, running Python) takes the hook's lines out of the caches. Returns
   the ticks spent in the calls alone; `whole` gets the loop's, the writes included. */
uint64_t pump(uint64_t sink, int64_t n, int alloc, int requested, int completed, volatile uint8_t* evict, int64_t bytes,
              uint64_t* whole) {
    sink_fn f = (sink_fn)(uintptr_t)sink;
    uint64_t in_calls = 0, began = ticks();
    for (int64_t i = 0; i < n; ++i) {
        uint64_t addr = 0x10000000ull + (uint64_t)(i & 63) * 4096;
        uint64_t t0 = ticks();
        f(alloc, 0, addr, 4096, 7, 0);
        f(requested, 0, addr, 4096, 7, 0);
        f(completed, 0, addr, 4096, 7, 0);
        in_calls += ticks() - t0;
        for (int64_t k = 0; k < bytes; k += 64) evict[k] += 1;
    }
    *whole = ticks() - began;
    return in_calls;
}
"""


def pump_library() -> ctypes.CDLL:
    library = c_library("pump", PUMP)
    library.pump.argtypes = [ctypes.c_uint64, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                             ctypes.c_int64, ctypes.POINTER(ctypes.c_uint64)]
    library.pump.restype = ctypes.c_uint64
    library.none_sink.restype = ctypes.c_uint64
    library.now_ticks.restype = ctypes.c_uint64
    return library


def deep(depth: int, fn):
    return deep(depth - 1, fn) if depth else fn()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--evict-kib", type=int, default=0, help="memory written between triples")
    a = ap.parse_args()
    from vramscope import _core

    library = pump_library()
    pump = library.pump
    k0, t0 = library.now_ticks(), time.perf_counter()
    time.sleep(0.2)
    ticks_per_second = (library.now_ticks() - k0) / (time.perf_counter() - t0)
    evict = ctypes.create_string_buffer(max(1, a.evict_kib * 1024))
    kind = _core.EventKind
    kinds = [int(kind.alloc.value), int(kind.free_requested.value), int(kind.free_completed.value)]
    sink = _core.allocator_sink()

    pumped = 0

    def loop(n: int, to: int = sink) -> tuple[float, float]:
        """ns per triple inside the calls, and of the whole loop (ticks scaled by their own rate)."""
        nonlocal pumped
        pumped += n if to == sink else 0
        whole = ctypes.c_uint64()
        in_calls = pump(to, n, *kinds, evict, a.evict_kib * 1024, ctypes.byref(whole))
        return 1e9 * in_calls / ticks_per_second / n, 1e9 * whole.value / ticks_per_second / n

    recorder = _core.Recorder(os.path.join(tempfile.mkdtemp(), "cost.vscope"))
    recorder.activate()
    deep(a.depth, lambda: loop(a.pairs // 10))  # warm: the stack is interned once
    pairs = a.pairs // (1 + a.evict_kib // 16)  # about as long, whatever the eviction
    ns, beside = [], []  # the hook's own time; what the loop's other work lost beside it
    for _ in range(a.repeats):
        (calls, whole), (calls_none, whole_none) = (deep(a.depth, lambda: loop(pairs)),
                                                    deep(a.depth, lambda: loop(pairs, library.none_sink())))
        ns.append(calls - calls_none)
        beside.append((whole - calls) - (whole_none - calls_none))
    recorder.deactivate()
    recorded = recorder.allocations
    recorder.close()
    print(f"{statistics.median(ns):.0f} ns per allocate+free (3 events; median of {a.repeats}, "
          f"range {min(ns):.0f}..{max(ns):.0f}, {1e3 / statistics.median(ns):.2f} M allocations/s); "
          f"{recorded:,} of {pumped:,} allocations recorded, {pumped - recorded:,} lost; the writes between "
          f"triples took {statistics.median(beside):+.0f} ns longer a triple (range {min(beside):+.0f}..{max(beside):+.0f})")
    return 0 if recorded == pumped else 1


if __name__ == "__main__":
    sys.exit(main())
