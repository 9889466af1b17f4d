"""A library's own pool, without a GPU: a fake JAX whose device counts its bytes in use, read at
each step end (capture/pools.py) through the recorder into the trace, judged by the live monitor
and by the analysis of the trace alike (analysis/pools.h): the leak is what is in use, never the
pool's doublings."""

import json
import sys
import types

import pytest

import vramscope
from vramscope import _core
from vramscope.capture import pools
from vramscope.owners.blocks import every_in_blocks

MiB = 1 << 20


class FakeDevice:
    """A GPU device as jax.Device shows its pool: in use +16 MiB a step, the pool doubling."""

    platform, id, local_hardware_id = "gpu", 0, 0

    def __init__(self):
        self.in_use = 0

    def memory_stats(self):
        pool = 32 * MiB
        while pool < self.in_use + 8 * MiB:
            pool *= 2
        return {"bytes_in_use": self.in_use, "pool_bytes": pool, "bytes_limit": 64 << 30}


@pytest.fixture
def fake_jax(monkeypatch):
    device = FakeDevice()
    jax = types.ModuleType("jax")
    jax.local_devices = lambda: [device]
    jax.live_arrays = lambda: []
    bridge = types.ModuleType("jax._src.xla_bridge")
    bridge.backends_are_initialized = lambda: True
    monkeypatch.setitem(sys.modules, "jax", jax)
    monkeypatch.setitem(sys.modules, "jax._src.xla_bridge", bridge)
    monkeypatch.delitem(sys.modules, "cupy", raising=False)  # a GPU test in this worker may have imported it
    return device, bridge


def test_jax_is_read_only_once_its_backends_are_up(fake_jax):
    device, bridge = fake_jax
    device.in_use = 48 * MiB
    assert pools.PoolCounters().read() == [(0, "JAX/XLA", 48 * MiB, 64 * MiB)]
    bridge.backends_are_initialized = lambda: False  # asking for a device now would start JAX
    assert pools.PoolCounters().read() == []


def test_a_library_that_is_not_imported_is_not_read(monkeypatch):
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    assert pools.PoolCounters().read() == []
    assert "jax" not in sys.modules and "cupy" not in sys.modules


def test_a_read_that_fails_is_said_once_and_not_tried_again(capfd):
    calls = []

    def broken():
        calls.append(1)
        raise RuntimeError("no stats")

    counters = pools.PoolCounters({"JAX/XLA": broken, "CuPy": lambda: [(0, "CuPy", 1, 2)]})
    assert counters.read() == [(0, "CuPy", 1, 2)]
    assert counters.read() == [(0, "CuPy", 1, 2)]
    assert len(calls) == 1
    err = capfd.readouterr().err
    assert err.count("could not read JAX/XLA's own pool (RuntimeError: no stats)") == 1, err


def test_a_pool_leak_is_the_counts_rate_live_and_in_the_trace(tmp_path, fake_jax):
    """The recorder's path: torch's steps, JAX's count at each step end; no driver call seen (the
    pool was taken before): the live monitor and the analysis both find 16 MiB a step in JAX's pool."""
    device, _ = fake_jax
    path = tmp_path / "pool.vscope"
    recorder = _core.Recorder(str(path))
    recorder.activate()
    counters = pools.PoolCounters()
    said = []
    try:
        for step in range(30):
            _core.feed_allocator_event(_core.EventKind.alloc, 0, 0x1_0000_0000, 4 * MiB)
            _core.feed_allocator_event(_core.EventKind.free, 0, 0x1_0000_0000, 4 * MiB)
            device.in_use += 16 * MiB
            said += recorder.end_step("step", counters.read())
        said += recorder.said()
        live = recorder.leaking()
    finally:
        recorder.deactivate()
        recorder.close()
    assert [s["shape"].is_leak for s in said] == [True], [s["line"] for s in said]
    assert said[0]["evidence"] == _core.LeakEvidence.pool_in_use
    assert "in JAX/XLA's pool (its bytes in use)" in said[0]["line"], said[0]["line"]
    assert len(live) == 1 and abs(live[0]["bytes_per_step"] - 16 * MiB) < 0.01 * 16 * MiB
    findings = json.loads(_core.analyze_json(str(path)))
    assert findings["verdict"] == "leak"
    (leak,) = findings["leaks"]
    assert (leak["evidence"], leak["library"], leak["site"]["file"]) == ("pool-in-use", "JAX/XLA", "JAX/XLA's pool")
    assert abs(leak["bytes_per_step"] - 16 * MiB) < 0.01 * 16 * MiB
    assert leak["site"] == live[0]["site"], "live and offline name one site"
    (jax,) = [lib for u in findings["usage"] for lib in u["libraries"] if lib["library"] == "JAX/XLA"]
    assert jax["in_use"] == 30 * 16 * MiB and jax["in_use"] + jax["cached"] == device.memory_stats()["pool_bytes"]


def test_track_reads_the_pools_at_each_step_end(tmp_path, fake_jax):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    device, _ = fake_jax
    kept = []
    with vramscope.track(tmp_path / "cpu.vscope", summary=False, live_warnings=False, explain=False) as capture:
        for _ in range(20):
            kept.append(torch.ones(4))  # torch's own memory, a little each step
            device.in_use += 16 * MiB
            vramscope.step()
    pooled = [leak for leak in capture.findings["leaks"] if leak["evidence"] == "pool-in-use"]
    assert len(pooled) == 1 and abs(pooled[0]["bytes_per_step"] - 16 * MiB) < 0.01 * 16 * MiB, capture.findings["leaks"]


def test_a_pools_arrays_are_searched_oldest_block_first_lowest_address_first():
    blocks = [(0x2000, 0x1000), (0x1000, 0x1000)]  # the older block first, whatever its address
    candidates = [("newest", 0x1800), ("kept-b", 0x2800), ("kept-a", 0x2000), ("kept-a", 0x2000), ("other", 0x9000)]
    assert every_in_blocks(blocks, candidates) == ["kept-a", "kept-b", "newest"]
