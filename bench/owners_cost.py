"""Cost of who_holds() on a large heap (the bound: <= 5 s with 1 M Python objects and 10 k tensors).

The heap: 10,000 CPU tensors in a model-like registry, ~1 M other objects (dicts, lists, small
instances) in user globals, and one target tensor reachable only through a deep path. Timed: a
target held from a user global (the common case), and one held only from a library module
(the whole process is walked).

  python bench/owners_cost.py
"""

from __future__ import annotations

import gc
import sys
import time
import types

import torch

import vramscope


class Record:
    def __init__(self, i):
        self.i = i
        self.tags = [i, str(i)]


def build_heap(objects: int, tensors: int):
    main = sys.modules["__main__"]
    main.REGISTRY = {f"layer{k}": {"weights": [torch.empty(16) for _ in range(tensors // 100)], "meta": {"k": k}}
                     for k in range(100)}
    main.RECORDS = [Record(i) for i in range(objects // 2)]  # each: an instance and a list, gc-tracked
    main.REGISTRY["layer57"]["cache"] = {"history": [None] * 50}
    target = torch.empty(1 << 16)
    main.REGISTRY["layer57"]["cache"]["history"][42] = target
    library = types.ModuleType("some_library")
    library.__file__ = "/usr/lib/python3/site-packages/some_library/__init__.py"
    sys.modules["some_library"] = library
    hidden = torch.empty(1 << 16)
    library.STATE = {"buffers": [hidden]}
    return target, hidden


def main() -> int:
    target, hidden = build_heap(1_000_000, 10_000)
    gc.collect()
    objects = gc.get_objects()
    print(f"heap: {len(objects):,} gc-tracked objects, {sum(type(o) is torch.Tensor for o in objects):,} tensors")
    del objects
    for name, t in (("held from a user global", target), ("held only from a library module", hidden)):
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            paths = vramscope.who_holds(t, timeout=30)
            times.append(time.perf_counter() - t0)
        print(f"{name:35s} {min(times):6.2f} s (best of 3)   {paths[0] if paths else 'not found'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
