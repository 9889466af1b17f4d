"""The recorder's cost per event without a GPU: allocate+free pairs fed to an active Recorder
from Python (_core.feed_allocator_event, as the allocator hook feeds it) under 20 Python frames,
so each allocation walks and finds its stack. Prints the median ns per pair over --repeats; the
Python calls themselves are in the figure, so compare builds, not absolute numbers.

  python bench/recorder_cost.py --pairs 300000 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def deep(depth: int, fn):
    return deep(depth - 1, fn) if depth else fn()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=300_000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    from vramscope import _core

    alloc, free, feed = _core.EventKind.alloc, _core.EventKind.free, _core.feed_allocator_event

    def loop(n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            feed(alloc, 0, 0x1000_0000, 4096)
            feed(free, 0, 0x1000_0000, 4096)
        return 1e9 * (time.perf_counter() - t0) / n

    recorder = _core.Recorder(os.path.join(tempfile.mkdtemp(), "cost.vscope"))
    recorder.activate()
    deep(20, lambda: loop(a.pairs // 3))  # warm: the stack is interned once
    ns = [deep(20, lambda: loop(a.pairs)) for _ in range(a.repeats)]
    recorder.deactivate()
    recorder.close()
    print(f"{statistics.median(ns):.0f} ns per allocate+free pair (median of {a.repeats})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
