"""Live capture without a GPU: the recorder driven through the hook's own entry point (with the GIL
released, as torch calls it), the API's fallbacks, the launcher, rank naming and rank skew."""

import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading

import pytest

from conftest import vramscope
from vramscope import _core
from vramscope.capture import naming

ALLOC, FREE = _core.EventKind.alloc, _core.EventKind.free
MiB = 1 << 20


def run_python(code: str, *args, env=None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=120, env=env, **kw)


def leaky_loop(recorder, steps=30, leak=MiB):
    """Each step a transient 4 MiB block and one `leak` block kept: what a leaking loop sends."""
    lines = []
    for step in range(steps):
        keep_forever(0x7000_0000 + step * leak, leak)
        _core.feed_allocator_event(ALLOC, 0, 0x1_0000_0000, 4 * MiB)
        _core.feed_allocator_event(FREE, 0, 0x1_0000_0000, 4 * MiB)
        lines += [said["line"] for said in recorder.end_step()]
    return lines + [said["line"] for said in recorder.said()]  # the last step ends drain only now


def keep_forever(addr, size):
    _core.feed_allocator_event(ALLOC, 0, addr, size)  # the line a leak report must name


KEEP_LINE = keep_forever.__code__.co_firstlineno + 1


def test_frame_reader_agrees_with_the_interpreter():
    assert _core.python_frames_supported()
    assert _core.python_frames_self_check() == ""


def checked_at(depth: int, via_generator: bool = False) -> list[str]:
    """The frame reader's self-check `depth` calls down (a generator's frame, which lives apart
    from the thread's frame stack, on the way when asked), and at every seventh on the way back."""
    if depth == 0:
        return [_core.python_frames_self_check()]
    if via_generator:
        return next(iter_checked(depth - 1))
    return checked_at(depth - 1) + ([_core.python_frames_self_check()] if depth % 7 == 0 else [])


def iter_checked(depth: int):
    yield checked_at(depth)


def test_the_hooks_hashed_walk_is_the_walk_at_any_depth():
    # The hook hashes the frames instead of copying them (capture/stack_hash.h): the hash must be
    # that of the frames the walk finds, however deep and whatever the walk before it left.
    results = []
    for depth in (0, 3, 10, 2, 40, 100, 1, 150, 5):
        results += checked_at(depth) + checked_at(depth, via_generator=depth > 0)
    assert set(results) == {""}


def test_a_leak_is_reported_live_at_its_line_and_in_the_trace(tmp_path):
    path = tmp_path / "leak.vscope"
    recorder = _core.Recorder(str(path))
    recorder.activate()
    try:
        lines = leaky_loop(recorder)
    finally:
        recorder.deactivate()
        recorder.close()
    assert lines, "the monitor must confirm the leak before the run ends"
    assert lines[0].startswith(f"leak: +1.0 MiB/step at test_capture.py:{KEEP_LINE} keep_forever")
    assert len(lines) == 1, "each site is reported once"
    assert recorder.allocations == 60
    text, findings = _core.summary(str(path))
    assert json.loads(findings)["verdict"] == "leak" and f"test_capture.py:{KEEP_LINE}" in text


def test_a_bounded_cache_is_not_reported(tmp_path):
    recorder = _core.Recorder(str(tmp_path / "cache.vscope"))
    recorder.activate()
    lines = []
    try:
        for step in range(40):  # an LRU of 6 entries: fills, then evicts the oldest each step
            _core.feed_allocator_event(ALLOC, 0, 0x5000_0000 + step * MiB, MiB)
            if step >= 6:
                _core.feed_allocator_event(FREE, 0, 0x5000_0000 + (step - 6) * MiB, MiB)
            lines += recorder.end_step()
        lines += recorder.said()
    finally:
        recorder.deactivate()
        recorder.close()
    assert lines == []


def test_a_cache_confirmed_while_it_filled_is_withdrawn_and_the_final_table_agrees(tmp_path):
    # Fills for 16 steps (long enough to look like a leak), then holds 16 MiB while it evicts.
    path = tmp_path / "slow_cache.vscope"
    recorder = _core.Recorder(str(path))
    recorder.activate()
    said = []
    try:
        for step in range(40):
            _core.feed_allocator_event(ALLOC, 0, 0x5000_0000 + step * MiB, MiB)
            if step >= 16:
                _core.feed_allocator_event(FREE, 0, 0x5000_0000 + (step - 16) * MiB, MiB)
            said += recorder.end_step()
        said += recorder.said()
        last_word = recorder.leaking()
    finally:
        recorder.deactivate()
        recorder.close()
    assert [s["shape"].is_leak for s in said] == [True, False], [s["line"] for s in said]
    assert said[1]["line"].startswith("withdrawn: ") and "not a leak" in said[1]["line"]
    assert last_word == []
    findings = json.loads(_core.analyze_json(str(path)))
    assert findings["verdict"] == "no-leak"
    assert [n["kind"] for n in findings["not_leaks"]] == ["bounded-cache"]


def test_growth_that_slows_but_goes_on_is_a_slowing_leak_live_and_final(tmp_path):
    path = tmp_path / "slowing.vscope"
    recorder = _core.Recorder(str(path))
    recorder.activate()
    said = []
    try:
        addr = 0x5000_0000
        for step in range(40):
            for _ in range(max(1, 8 - step // 4)):  # 8 blocks a step at first, one a step from step 28
                keep_forever(addr, MiB)
                addr += MiB
            said += recorder.end_step()
        said += recorder.said()
    finally:
        recorder.deactivate()
        recorder.close()
    assert [s["shape"].spelling for s in said] in (["rising"], ["slowing"])
    findings = json.loads(_core.analyze_json(str(path)))
    assert findings["verdict"] == "leak"
    assert findings["leaks"][0]["shape"] == "slowing"


def test_a_recorder_that_saw_no_allocation_leaves_no_file(tmp_path):
    path = tmp_path / "idle.vscope"
    recorder = _core.Recorder(str(path))
    recorder.end_step()
    recorder.close()
    assert not path.exists()


def run_at_once(*functions):
    """Each function on a thread of its own, all started before any is waited for."""
    threads = [threading.Thread(target=f) for f in functions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_two_threads_feeding_at_once_lose_nothing(tmp_path):
    path = tmp_path / "threads.vscope"
    recorder = _core.Recorder(str(path))
    recorder.activate()

    def worker_a():
        for i in range(5000):
            _core.feed_allocator_event(ALLOC, 0, 0x1000_0000 + i * 512, 512)

    def worker_b():
        for i in range(5000):
            _core.feed_allocator_event(ALLOC, 1, 0x9000_0000 + i * 512, 512)

    run_at_once(worker_a, worker_b)
    recorder.deactivate()
    recorder.close()
    assert recorder.allocations == 10000
    functions = {function for _, _, function in _core.frames(str(path))}
    assert {"worker_a", "worker_b"} <= functions


def test_threads_that_end_leave_every_event_behind(tmp_path):
    """A thread's hook state ends with the thread; its queued events stay with the recorder until
    the drain takes them: fifty short-lived threads, a hundred allocations each, none lost."""
    path = tmp_path / "short_lived.vscope"
    recorder = _core.Recorder(str(path))
    recorder.activate()

    def short_lived(k):
        for i in range(100):
            _core.feed_allocator_event(ALLOC, 0, 0x1000_0000 + (k * 100 + i) * 512, 512)

    for wave in range(10):
        run_at_once(*(lambda k=wave * 5 + k: short_lived(k) for k in range(5)))
    recorder.deactivate()
    recorder.close()
    assert recorder.allocations == 5000
    assert json.loads(_core.analyze_json(str(path)))["events"] == 5000


def test_an_autograd_node_is_the_outermost_frame(tmp_path):
    path = tmp_path / "node.vscope"
    recorder = _core.Recorder(str(path))
    recorder.activate()
    _core.feed_allocator_event(ALLOC, 0, 0x4000_0000, MiB, 0, "MmBackward0")
    recorder.deactivate()
    recorder.close()
    assert ("<autograd engine>", 0, "MmBackward0") in _core.frames(str(path))


def test_a_free_keeps_its_place_when_its_completion_waited(tmp_path):
    """The recorder folds a completion into its request only when nothing came between them (one
    `free`); a completion that waited, here behind another allocation, keeps both, in order."""
    path, exported = tmp_path / "frees.vscope", tmp_path / "frees.pickle"
    kind = _core.EventKind
    recorder = _core.Recorder(str(path))
    recorder.activate()
    a, b = 0x1000_0000, 0x2000_0000
    for k, addr in [(kind.alloc, a), (kind.free_requested, a), (kind.alloc, b), (kind.free_completed, a),
                    (kind.free_requested, b), (kind.free_completed, b)]:
        _core.feed_allocator_event(k, 0, addr, MiB)
    recorder.deactivate()
    recorder.close()
    from vramscope.commands import main

    assert main(["export", str(path), "--memory-viz", str(exported)]) == 0
    with open(exported, "rb") as f:
        entries = pickle.load(f)["device_traces"][0]
    assert [(e["action"], e["addr"]) for e in entries] == [
        ("alloc", a), ("free_requested", a), ("alloc", b), ("free_completed", a),
        ("free_requested", b), ("free_completed", b)]


def test_a_request_waits_only_for_its_own_device_and_is_written_if_the_capture_ends_first(tmp_path):
    """A free request waits in its device's lane for that device's next call: another device's
    events pass it, its completion joins it, and a request nothing followed is written at close."""
    path, exported = tmp_path / "waiting.vscope", tmp_path / "waiting.pickle"
    kind = _core.EventKind
    recorder = _core.Recorder(str(path))
    recorder.activate()
    a, b, c = 0x1000_0000, 0x2000_0000, 0x3000_0000
    for k, device, addr in [(kind.alloc, 0, a), (kind.alloc, 0, c), (kind.free_requested, 0, a), (kind.alloc, 1, b),
                            (kind.free_completed, 0, a), (kind.free_requested, 0, c)]:
        _core.feed_allocator_event(k, device, addr, MiB)
    recorder.deactivate()
    recorder.close()
    from vramscope.commands import main

    assert main(["export", str(path), "--memory-viz", str(exported)]) == 0
    with open(exported, "rb") as f:
        traces = pickle.load(f)["device_traces"]
    assert [(e["action"], e["addr"]) for e in traces[0]] == [
        ("alloc", a), ("alloc", c), ("free_requested", a), ("free_completed", a), ("free_requested", c)]
    assert [(e["action"], e["addr"]) for e in traces[1]] == [("alloc", b)]


def test_an_unwritable_path_is_a_clear_error():
    with pytest.raises(RuntimeError, match="/no/such/dir/x.vscope: cannot create trace file"):
        _core.Recorder("/no/such/dir/x.vscope")


def test_a_full_disk_stops_capture_with_one_fault_and_no_exception(tmp_path):
    # RLIMIT_FSIZE makes write() fail with EFBIG past 64 KiB, as a full disk would.
    proc = run_python(f"""
        import resource, signal
        from vramscope import _core
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
        r = _core.Recorder({str(tmp_path / 'full.vscope')!r})
        r.activate()
        for step in range(400):
            for i in range(200):
                _core.feed_allocator_event(_core.EventKind.alloc, 0, (step * 200 + i) * 4096 + (i % 7) * 512, 512 * (1 + i % 13))
            r.end_step()
            r.flush()
        print("fault:", r.fault())
        r.deactivate(); r.close()
        print("done")
    """)
    assert proc.returncode == 0, proc.stderr
    assert "fault: capture stopped:" in proc.stdout and "write failed" in proc.stdout
    assert proc.stdout.rstrip().endswith("done")


def test_a_forked_child_never_writes_to_the_parents_trace(tmp_path):
    path = tmp_path / "fork.vscope"
    proc = run_python(f"""
        import os
        from vramscope import _core
        r = _core.Recorder({str(path)!r}); r.activate()
        for i in range(100):
            _core.feed_allocator_event(_core.EventKind.alloc, 0, 0x1000_0000 + i * 4096, 4096)
        pid = os.fork()
        if pid == 0:
            r.deactivate(); r.abandon()
            for i in range(100):
                _core.feed_allocator_event(_core.EventKind.alloc, 0, 0x9000_0000 + i * 4096, 4096)
            r.end_step(); r.flush()
            os._exit(0)
        os.waitpid(pid, 0)
        r.end_step(); r.deactivate(); r.close()
        print(r.allocations)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["100"]
    findings = __import__("vramscope").analyze(path)
    assert findings["steps"]["count"] == 1
    assert not findings.get("warnings")


def test_track_without_cuda_records_live_tensors_and_says_so_first(capfd, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    import vramscope
    from vramscope.capture.session import LIVE_TENSORS_LINE

    kept = []
    with vramscope.track(tmp_path / "cpu.vscope") as capture:
        for _ in range(12):
            kept.append(torch.ones(64, 64))
            vramscope.step()
    err = capfd.readouterr().err
    assert err.splitlines()[0] == f"vramscope: {LIVE_TENSORS_LINE}", err
    assert capture.path == str(tmp_path / "cpu.vscope") and capture.leaked, err
    assert capture.findings["meta"]["device.0"] == "cpu"
    assert "\n  cpu  step 0 -> 11: " in err and "cuda:" not in err, "the summary names the device cpu"
    assert "held by test_track_without_cuda_records_live_tensors_and_says_so_first() local 'kept'[" in err, err


def test_trace_files_carry_the_rank_in_their_name(tmp_path):
    assert naming.trace_path("run.vscope", env={}).name == "run.vscope"
    assert naming.trace_path("run", env={}).name == "run.vscope"
    assert naming.trace_path("out/run.vscope", env={"RANK": "3", "WORLD_SIZE": "8"}).as_posix() == "out/run.rank3.vscope"
    assert naming.trace_path("run.vscope", env={}, shared_name=False).name == f"run.pid{os.getpid()}.vscope"
    for name in ["run.rank10.vscope", "run.rank2.vscope", "run.vscope", "run.pid7.vscope", "running.vscope"]:
        (tmp_path / name).write_bytes(b"")
    found = [p.name for p in naming.run_files(tmp_path / "run.vscope", since=0)]
    assert found == ["run.vscope", "run.rank2.vscope", "run.rank10.vscope", "run.pid7.vscope"]


def test_rank_skew_is_flagged(tmp_path):
    paths = []
    for rank in (0, 1):
        path = tmp_path / f"job.rank{rank}.vscope"
        recorder = _core.Recorder(str(path))
        recorder.meta("rank", str(rank))
        recorder.activate()
        if rank == 1:
            leaky_loop(recorder)
        else:
            for _ in range(30):
                _core.feed_allocator_event(ALLOC, 0, 0x1_0000_0000, 4 * MiB)
                _core.feed_allocator_event(FREE, 0, 0x1_0000_0000, 4 * MiB)
                recorder.end_step()
        recorder.deactivate()
        recorder.close()
        paths.append(str(path))
    out = vramscope("analyze", *paths, "--json", str(tmp_path / "f.json")).stdout
    assert "RANK SKEW" in out and "only some ranks leak: rank 1 leaks, rank 0 does not" in out

    ranks = json.loads((tmp_path / "f.json").read_text())["ranks"]
    assert [r["rank"] for r in ranks["rows"]] == [0, 1]
    assert ranks["rows"][1]["leak_bytes_per_step"] == pytest.approx(MiB, rel=0.01)


def test_run_passes_the_commands_exit_code_through(tmp_path):
    proc = vramscope("run", "-o", str(tmp_path / "x.vscope"), "--", sys.executable, "-c", "import sys; sys.exit(3)",
                     check_rc=3)
    assert "the command failed (exit code 3) before it wrote a trace" in proc.stderr


def test_run_starts_capture_in_the_launched_process(tmp_path):
    pytest.importorskip("torch")
    code = "import torch; print('trained', torch.cuda.is_available())"
    proc = vramscope("run", "-o", str(tmp_path / "x.vscope"), "--", sys.executable, "-c", code, check_rc=0)
    assert "trained" in proc.stdout
    if "trained False" in proc.stdout:  # no GPU: the launched process records live tensors, and says so once
        assert proc.stderr.count("vramscope: no CUDA here: capturing live tensors") == 1, proc.stderr


def test_run_without_a_command_is_a_usage_error():
    proc = vramscope("run", check_rc=2)
    assert "no command given" in proc.stderr


CHILDREN_MAKE_TENSORS = """
import multiprocessing, subprocess, sys
import torch

def worker():
    kept = [torch.ones(256, 256) for _ in range(4)]

if __name__ == "__main__":
    kept = []
    for _ in range(12):
        kept.append(torch.ones(64, 64))
        torch.optim.SGD([torch.zeros(1, requires_grad=True)]).step()
    subprocess.run([sys.executable, "-c", "import torch; kept = [torch.ones(256, 256) for _ in range(4)]"], check=True)
    child = multiprocessing.get_context("spawn").Process(target=worker)
    child.start()
    child.join()
    print("children", child.exitcode)
"""


def test_run_without_cuda_records_the_commands_process_not_the_ones_it_starts(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the processes that initialise it are recorded")
    (tmp_path / "train.py").write_text(CHILDREN_MAKE_TENSORS)
    proc = vramscope("run", "-o", str(tmp_path / "t.vscope"), "--", sys.executable, str(tmp_path / "train.py"),
                     check_rc=0)
    assert "children 0" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.count("vramscope: no CUDA here: capturing live tensors") == 1, proc.stderr
    assert sorted(p.name for p in tmp_path.glob("t*.vscope")) == ["t.vscope"], "a subprocess and a spawned child write nothing"
    assert "LEAK  +16.0 KiB per optimizer step" in proc.stdout, proc.stdout
