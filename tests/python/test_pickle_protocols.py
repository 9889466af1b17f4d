"""Snapshots pickled at every protocol Python writes (2 to 5; Python 3.14 writes 5 by default):
each fixture loaded with Python's own pickle, dumped again at that protocol, plain and gzip'd, and
analysed: the findings are those of the fixture as recorded."""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

import pytest

from vramscope import _core

DATA = Path(__file__).resolve().parent.parent / "data"
FIXTURES = ["leak_ctx_losses", "bounded_lru_cache", "leak_offload_slowing"]


def findings(path: Path) -> dict:
    f = json.loads(_core.analyze_json(str(path)))
    for k in ("source", "import_seconds", "analysis_seconds"):
        f.pop(k)
    return f


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_protocol_reads_as_the_recorded_snapshot(tmp_path, fixture, protocol):
    recorded = DATA / f"{fixture}.pickle.gz"
    with gzip.open(recorded, "rb") as f:
        snapshot = pickle.load(f)
    plain = tmp_path / f"{fixture}.p{protocol}.pickle"
    plain.write_bytes(pickle.dumps(snapshot, protocol=protocol))
    packed = tmp_path / f"{fixture}.p{protocol}.pickle.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    want = findings(recorded)
    assert findings(plain) == want
    assert findings(packed) == want
