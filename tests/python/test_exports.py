"""Exports open in the tools they target: the memory_viz pickle in torch's own _memory_viz (and
reads back entry for entry), the Perfetto JSON as trace events with counters, steps and leaks."""

import gzip
import json
import pickle
import subprocess
import sys

import pytest

from conftest import FIXTURES, truth, vramscope


DATA = FIXTURES[0].parent


def viewer_finds_every_block_in_a_segment(snapshot: dict) -> None:
    """What memory_viz's "Allocator State History" does at each entry (MemoryViz.js, simulate_memory):
    from the segments at the end, back through the trace, each live block must lie in a segment,
    and a segment's blocks add up to it (torch.cuda._memory_viz's own check)."""
    for seg in snapshot["segments"]:
        assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"], seg["address"]
    for device, trace in enumerate(snapshot["device_traces"]):
        segments = {s["address"]: s["total_size"] for s in snapshot["segments"] if s["device"] == device}
        blocks = {b["address"] for s in snapshot["segments"] if s["device"] == device for b in s["blocks"]
                  if b["state"] in ("active_allocated", "active_pending_free")}
        for i, e in enumerate(reversed(trace)):
            if e["action"] in ("free_completed", "free"):
                blocks.add(e["addr"])
            elif e["action"] == "alloc":
                blocks.discard(e["addr"])
            elif e["action"] in ("segment_free", "segment_unmap"):
                segments[e["addr"]] = e["size"]
            elif e["action"] in ("segment_alloc", "segment_map"):
                segments.pop(e["addr"], None)
            if i % 50 == 0:
                starts = sorted(segments)
                for addr in blocks:
                    inside = [a for a in starts if a <= addr < a + segments[a]]
                    assert inside, f"device {device}, {len(trace) - i} entries in: block {addr:#x} in no segment"


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name.split(".")[0])
def test_memory_viz_pickle_holds_every_entry_and_torch_draws_it(fixture, tmp_path):
    out = tmp_path / "export.pickle"
    vramscope("export", str(fixture), "--memory-viz", str(out))
    mine = pickle.loads(out.read_bytes())
    original = pickle.load(gzip.open(fixture))
    # The allocator at the end, as the snapshot had it: each segment, its blocks (free gaps as
    # inactive ones), the annotations and the allocator's settings.
    def segment(s):
        blocks = [(b["address"], b["size"], b["state"], [f["name"] for f in b.get("frames", [])]) for b in s["blocks"]
                  if b["state"] != "inactive"]
        return s["device"], s["address"], s["total_size"], s["stream"], s["is_expandable"], blocks
    assert sorted(map(segment, mine["segments"])) == sorted(map(segment, original["segments"]))
    assert mine["external_annotations"] == original.get("external_annotations", [])
    settings = original["allocator_settings"]
    # A "" the trace entries shared through the memo went with them: left out, never made up.
    assert mine["allocator_settings"] in (settings, {k: v for k, v in settings.items() if v != ""})
    viewer_finds_every_block_in_a_segment(mine)
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
    proc = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "stats", str(out)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "Segment size mismatch" not in proc.stdout + proc.stderr, proc.stderr


@pytest.mark.parametrize("trace", ["device/pg_per_step.vscope", "peak/peak_adamw.vscope", "good"])
def test_a_trace_exports_its_allocator_state_replayed_so_the_viewer_draws_every_block(trace, tmp_path):
    """A .vscope has events alone: the segments at the end come from its segment events, a segment
    made before the capture from the blocks found in none (memory_viz cannot draw a block outside one)."""
    path = DATA / "hostile" / "good.vscope" if trace == "good" else DATA / trace
    out = tmp_path / "export.pickle"
    vramscope("export", str(path), "--memory-viz", str(out))
    mine = pickle.loads(out.read_bytes())
    assert mine["segments"] and any(b["state"] == "active_allocated" for s in mine["segments"] for b in s["blocks"])
    viewer_finds_every_block_in_a_segment(mine)


def test_a_gz_name_writes_the_memory_viz_pickle_gzipd(tmp_path):
    plain, packed = tmp_path / "viz.pickle", tmp_path / "viz.pickle.gz"
    vramscope("export", str(FIXTURES[0]), "--memory-viz", str(plain))
    said = vramscope("export", str(FIXTURES[0]), "--memory-viz", str(packed)).stdout
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
    assert packed.stat().st_size * 5 < plain.stat().st_size and "gunzip it" in said
    assert json.loads(vramscope("analyze", str(packed), "--json", "-").stdout)["events"] > 0  # it reads back


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
