"""The benchmarks' designs, which need no GPU to check: the alternating benchmark's orders of
variants (bench/capture_overhead.py), whose balance its figures rest on."""

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import capture_overhead  # noqa: E402


def test_the_orders_put_every_variant_in_every_place_and_after_every_other_equally_often():
    # A rotation failed this: it kept each variant's predecessor, and vramscope's step paid for
    # what torch's recorder left behind 4 cycles in 5.
    for variants in (capture_overhead.IN_PROCESS, ["none", "null", "no-stacks", "vramscope"], ["a", "b", "c"]):
        orders = capture_overhead.balanced_orders(variants)
        assert all(sorted(order) == sorted(variants) for order in orders)
        follows = Counter((a, b) for order in orders for a, b in zip(order, order[1:]))
        assert set(follows) == {(a, b) for a in variants for b in variants if a != b}
        assert len(set(follows.values())) == 1, follows
        places = Counter((v, i) for order in orders for i, v in enumerate(order))
        assert len(places) == len(variants) ** 2 and len(set(places.values())) == 1, places
