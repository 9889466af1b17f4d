"""Exports open in the tools they target: the memory_viz pickle in torch's own _memory_viz (and
reads back entry for entry), the Perfetto JSON as trace events with counters, steps and leaks."""

import gzip
import json
import pickle
import subprocess
import sys

import pytest

from conftest import FIXTURES, truth, vramscope


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name.split(".")[0])
def test_memory_viz_pickle_holds_every_entry_and_torch_draws_it(fixture, tmp_path):
    out = tmp_path / "export.pickle"
    vramscope("export", str(fixture), "--memory-viz", str(out))
    mine = pickle.loads(out.read_bytes())
    original = pickle.load(gzip.open(fixture))
    assert mine["segments"] == []
    for ours, theirs in zip(mine["device_traces"], original["device_traces"]):
        assert len(ours) == len(theirs)
        for a, b in zip(ours[:200], theirs[:200]):
            assert (a["action"], a.get("addr"), a["size"], a["time_us"]) == (b["action"], b.get("addr"), b["size"],
                                                                             b["time_us"])
            if not a["action"].startswith("free"):  # .vscope keeps stacks where a block is made, not freed
                assert [f["name"] for f in a["frames"]] == [f["name"] for f in b["frames"]]
    pytest.importorskip("torch")
    html = tmp_path / "trace.html"
    proc = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", str(out), "-o", str(html)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert html.stat().st_size > 1000


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name.split(".")[0])
def test_perfetto_trace_has_counters_steps_and_leak_starts(fixture, tmp_path):
    out = tmp_path / "trace.json"
    vramscope("export", str(fixture), "--perfetto", str(out))
    events = json.loads(out.read_text())["traceEvents"]
    # Torch's counters: memory outside its allocator has tracks of its own.
    counters = [e for e in events if e["ph"] == "C" and e["name"].endswith(" memory")]
    steps = [e for e in events if e["ph"] == "X"]
    leaks = [e for e in events if e["ph"] == "i"]
    # 30 steps recorded; a period (a loop with no optimizer) leaves its last repeat as the unfinished tail.
    assert len(steps) >= 29 and all(isinstance(e["ts"], int) and e["dur"] >= 0 for e in steps)
    assert len(counters) >= len(steps) and all({"allocated", "reserved"} <= e["args"].keys() for e in counters)
    assert [e["ts"] for e in counters] == sorted(e["ts"] for e in counters)
    expected = truth(fixture)["expected"]
    if expected["verdict"] == "leak":
        assert any(f":{expected['leak_site']['line']} {expected['leak_site']['function']}" in e["name"] for e in leaks)
    else:
        assert leaks == []


def test_export_without_an_output_is_a_usage_error():
    proc = vramscope("export", str(FIXTURES[0]), check_rc=2)
    assert "--memory-viz" in proc.stderr
