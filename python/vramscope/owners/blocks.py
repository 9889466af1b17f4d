"""Which objects' memory lies in a leak's blocks: the one address rule every kind of memory shares."""

from __future__ import annotations

import bisect
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")


def in_blocks(blocks: Iterable[tuple[int, int]], candidates: Iterable[tuple[T, int]],
              accept: Callable[[T], bool] = lambda obj: True) -> list[T]:
    """One object per (address, size) block whose memory starts inside it, in the blocks' order.
    `candidates` yields (object, address its memory starts at); `accept` is asked only of those that
    fall in a block (a check that costs a driver call, such as is_pinned(), is asked of few)."""
    spans = sorted((addr, addr + size) for addr, size in blocks)
    if not spans:
        return []
    firsts = [s for s, _ in spans]
    found: dict[tuple[int, int], T] = {}
    for obj, ptr in candidates:
        i = bisect.bisect_right(firsts, ptr) - 1
        if i >= 0 and ptr < spans[i][1] and spans[i] not in found and accept(obj):
            found[spans[i]] = obj
    return [found[(addr, addr + size)] for addr, size in dict.fromkeys(blocks) if (addr, addr + size) in found]


def every_in_blocks(blocks: Iterable[tuple[int, int]], candidates: Iterable[tuple[T, int]]) -> list[T]:
    """Every object whose memory starts inside a block, by the blocks' order, then lowest address
    first (a pool's blocks, oldest first: what a pool sub-allocated first lies lowest in its block, and
    was kept the longest). Each object once."""
    order = {span: i for i, span in enumerate(dict.fromkeys((addr, addr + size) for addr, size in blocks))}
    spans = sorted(order)
    if not spans:
        return []
    firsts = [s for s, _ in spans]
    found: dict[int, tuple[int, int, T]] = {}
    for obj, ptr in candidates:
        i = bisect.bisect_right(firsts, ptr) - 1
        if i >= 0 and ptr < spans[i][1] and id(obj) not in found:
            found[id(obj)] = (order[spans[i]], ptr, obj)
    return [obj for _, _, obj in sorted(found.values(), key=lambda f: (f[0], f[1]))]
