"""Live capture on a real GPU (gpu marker: skipped without CUDA). Each test runs its workload in a
fresh process, as users do, so one capture never sees another's allocator state."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import DATA, truth

pytestmark = pytest.mark.gpu
sys.path.insert(0, str(DATA))
from record_fixtures import SCENARIOS  # noqa: E402  (the recording script is the corpus' one list)

LIVE_LINE = re.compile(r"^vramscope: (leak|withdrawn): (?:\+\S+ \S+/step at )?(.+?) \(cuda:(\d+)", re.M)


def python(code: str, *args, timeout=300, check=True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=timeout, **kw)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def findings(path) -> dict:
    import vramscope

    return vramscope.analyze(path)


def measured_rate(live_truth: dict, f: dict) -> float:
    """memory_allocated()'s least-squares slope over the steps the analysis judged: the trace's
    step k is the run's step `offset + k` (a capture that started mid-run)."""
    import numpy as np

    offset = live_truth["expected"].get("live_capture_from_step", 0) + f["steps"]["before_trace"]
    allocated = [s["allocated"] for s in live_truth["steps"]][offset:]
    first, last = f["steps"]["warmup"], min(f["steps"]["count"], len(allocated)) - 1
    return float(np.polyfit(np.arange(first, last + 1), allocated[first:last + 1], 1)[0])


def live_last_word(stderr: str) -> set:
    """The sites the live monitor held as leaking when the run ended: each confirmation, less
    each withdrawal after it."""
    leaking = set()
    for said, where, device in LIVE_LINE.findall(stderr):
        (leaking.add if said == "leak" else leaking.discard)((where, int(device)))
    return leaking


def table_sites(f: dict) -> set:
    return {(f"{l['site']['file'].rsplit('/', 1)[-1]}:{l['site']['line']} {l['site']['function']}", l["device"])
            for l in f["leaks"]}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_scenario_captured_live_gives_its_verdict_rate_site_and_owner(scenario, tmp_path):
    out = tmp_path / f"{scenario}.vscope"
    proc = subprocess.run([sys.executable, str(DATA / "record_fixtures.py"), "--scenario", scenario, "--live", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The live run's own truth: its sites are the lines of the script as it is now.
    live_truth = json.loads(Path(str(out) + ".steps.json").read_text())
    expected = live_truth["expected"]
    assert expected["verdict"] == truth(DATA / f"{scenario}.pickle.gz")["expected"]["verdict"]
    f = findings(out)
    assert f["steps"]["source"] == "markers"
    assert f["verdict"] == expected["verdict"], proc.stderr
    # The live warnings' last word is the final table.
    assert live_last_word(proc.stderr) == table_sites(f), proc.stderr
    if expected["verdict"] != "leak":
        return
    top = f["leaks"][0]
    # The capture names a method with its class (`KeepSiLU.forward`), a torch snapshot by its name alone.
    assert (top["site"]["function"].rsplit(".", 1)[-1], top["site"]["line"]) == (expected["leak_site"]["function"],
                                                                                  expected["leak_site"]["line"])
    measured = measured_rate(live_truth, f)
    assert f["leak_bytes_per_step"] == pytest.approx(measured, rel=0.10)
    assert (top["stream_kind"] == "side") == (expected["leak_stream"] == "side")
    if "shape" in expected:
        assert top["shape"] == expected["shape"]
    assert "vramscope: leak: +" in proc.stderr, "the leak must be reported while the run goes on"
    owners = json.loads(Path(str(out) + ".owners.json").read_text())
    mine = next(o for o in owners if o["site"] == top["site"])
    owner = OWNER_OF.get(scenario) or expected["owner"]
    assert mine["owner_lines"], owners
    line = mine["owner_lines"][0]
    assert line.startswith(tuple(owner["starts"])) and owner["through"] in line, owners


# The five first scenarios' truths predate the owner field.
OWNER_OF = {
    "leak_ctx_losses": {"starts": ["scenario_leak_ctx_losses() local 'losses'["], "through": ".kept"},
    "leak_offload_stream": {"starts": ["scenario_leak_offload_stream() local 'stash'["], "through": ""},
}


@pytest.mark.parametrize("scenario", ["leak_main_local", "leak_trainer_attr", "leak_offload_slowing",
                                      "leak_compiled_outputs", "leak_several_sizes", "leak_hook_no_grad"])
def test_vramscope_run_names_owners_that_were_locals_of_a_function_long_returned(scenario, tmp_path):
    """Under `vramscope run` the process ends after the training function returned: its locals are
    gone at exit, so the owner must have been found while the run went on."""
    out = tmp_path / "run.vscope"
    steps = tmp_path / "truth.json"
    proc = subprocess.run([sys.executable, "-m", "vramscope", "run", "-o", str(out), "--json", str(tmp_path / "f.json"),
                           "--", sys.executable, str(DATA / "record_fixtures.py"), "--scenario", scenario,
                           "--plain", str(steps)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = json.loads(steps.read_text())["expected"]
    owner = expected["owner"]
    assert "Who holds it" in proc.stdout, proc.stdout + proc.stderr
    held = proc.stdout[proc.stdout.index("Who holds it"):]
    assert any(s in held for s in owner["starts"]) and owner["through"] in held and "found at step" in held, proc.stdout
    f = json.loads((tmp_path / "f.json").read_text())
    assert f["verdict"] == "leak"
    assert f["leaks"][0]["owners"][0]["path"].startswith(tuple(owner["starts"]))
    # Every leak of several has its owner, the largest (on a side stream) included.
    for component in expected.get("leak_components", []):
        leak = next(l for l in f["leaks"] if l["site"]["line"] == component["site"]["line"])
        assert leak.get("owners") and leak["owners"][0]["path"].startswith(tuple(component["owner"]["starts"])), leak
    # Inductor's compile workers never allocate: no trace of theirs, no run in the summary.
    assert [p.name for p in tmp_path.glob("run*.vscope")] == ["run.vscope"]


def test_every_allocation_is_captured(tmp_path):
    out = tmp_path / "complete.vscope"
    proc = python(f"""
        import torch, vramscope
        torch.cuda.init()
        model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]).cuda()
        opt = torch.optim.AdamW(model.parameters())
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        with vramscope.track({str(out)!r}, summary=False) as c:
            for _ in range(20):
                model(torch.randn(64, 256, device="cuda")).pow(2).mean().backward()
                opt.step(); opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            delta = torch.cuda.memory_stats()["allocation.all.allocated"] - before
        print(delta, c.allocations)
    """)
    delta, captured = map(int, proc.stdout.split())
    assert delta > 1000
    assert captured == delta
    f = findings(out)
    assert f["steps"]["count"] == 20 and f["verdict"] == "no-leak"


def test_backward_allocations_carry_their_autograd_node(tmp_path):
    out = tmp_path / "nodes.vscope"
    python(f"""
        import torch, vramscope
        torch.cuda.init()
        w = torch.randn(512, 512, device="cuda", requires_grad=True)
        keep = []
        with vramscope.track({str(out)!r}, summary=False):
            for _ in range(12):
                x = torch.randn(256, 512, device="cuda")
                (x @ w).relu().sum().backward()
                keep.append(w.grad.clone())  # a leak made in user code, after backward
                w.grad = None
                vramscope.step()
    """)
    from vramscope import _core

    frames = _core.frames(str(out))
    assert ("<autograd engine>", 0, "MmBackward0") in frames, frames


def test_two_threads_allocating_are_both_captured(tmp_path):
    out = tmp_path / "threads.vscope"
    proc = python(f"""
        import threading, torch, vramscope
        torch.cuda.init()
        def worker_a(n):
            return [torch.empty(1 << 20, device="cuda") for _ in range(n)]
        def worker_b(n):
            return [torch.empty(3 << 20, device="cuda") for _ in range(n)]
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        with vramscope.track({str(out)!r}, summary=False) as c:
            held = []
            ts = [threading.Thread(target=lambda f=f: held.append(f(200))) for f in (worker_a, worker_b)]
            [t.start() for t in ts]; [t.join() for t in ts]
            delta = torch.cuda.memory_stats()["allocation.all.allocated"] - before
        print(delta, c.allocations)
    """)
    delta, captured = map(int, proc.stdout.split())
    assert captured == delta == 400
    from vramscope import _core

    functions = {function for _, _, function in _core.frames(str(out))}
    assert {"worker_a", "worker_b"} <= functions


def test_side_stream_is_named_and_its_leak_attributed(tmp_path):
    out = tmp_path / "stream.vscope"
    python(f"""
        import torch, vramscope
        torch.cuda.init()
        stash = []
        with vramscope.track({str(out)!r}, summary=False):
            side = torch.cuda.Stream()  # the side stream
            for _ in range(24):
                with torch.cuda.stream(side):
                    stash.append(torch.empty(2 << 20, device="cuda"))
                torch.cuda.current_stream().wait_stream(side)
                tmp = torch.empty(8 << 20, device="cuda"); del tmp
                vramscope.step()
    """)
    f = findings(out)
    assert f["verdict"] == "leak"
    top = f["leaks"][0]
    assert top["stream_kind"] == "side"
    assert top["bytes_per_step"] == pytest.approx(8 << 20, rel=0.05)
    labels = {k: v for k, v in f["meta"].items() if k.startswith("stream.")}
    assert any("created at <string>:6" in v for v in labels.values()), labels


def test_sigkill_leaves_a_readable_trace_up_to_the_last_second(tmp_path):
    out = tmp_path / "killed.vscope"
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time, torch, vramscope
        torch.cuda.init()
        keep = []
        with vramscope.track({str(out)!r}, summary=False):
            for i in range(10**9):
                keep.append(torch.empty(1 << 16, device="cuda"))
                vramscope.step()
                print(i + 1, time.time(), flush=True)
                time.sleep(0.002)
    """)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    assert first, proc.stderr.read()
    time.sleep(3)
    killed_at = time.time()
    proc.send_signal(signal.SIGKILL)
    lines = [first] + proc.stdout.read().splitlines()
    proc.wait()
    done = [(int(n), float(t)) for n, t in (line.split() for line in lines if line.strip())]
    steps_a_second_before = max(n for n, t in done if t <= killed_at - 1.0)
    f = findings(out)
    assert f["steps"]["count"] >= steps_a_second_before > 100
    assert f["verdict"] == "leak"


def test_oom_writes_the_event_and_summary_before_the_exception(tmp_path):
    out = tmp_path / "oom.vscope"
    proc = python(f"""
        import sys, torch, vramscope
        torch.cuda.init()
        # Out of memory at a tenth of the device: the suite's other tests share the GPU meanwhile.
        torch.cuda.set_per_process_memory_fraction(0.1)
        keep = []
        with vramscope.track({str(out)!r}, summary=False):
            try:
                for i in range(10**6):
                    keep.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
                    vramscope.step()
            except torch.cuda.OutOfMemoryError:
                print("caught", file=sys.stderr, flush=True)
                raise SystemExit(0)
    """, timeout=300)
    err = proc.stderr
    assert "vramscope: CUDA out of memory on cuda:0" in err
    assert err.index("vramscope: CUDA out of memory") < err.index("LEAK") < err.index("caught")
    f = findings(out)
    assert f["devices"][0].get("oom_step") is not None


def test_run_captures_a_script_with_no_code_change(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import torch
        model = torch.nn.Linear(1024, 1024).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        history = []
        for step in range(40):
            loss = model(torch.randn(32, 1024, device="cuda")).pow(2).mean()
            loss.backward()
            opt.step(); opt.zero_grad()
            history.append(torch.empty(1 << 18, device="cuda"))  # 1 MiB per step, kept
    """))
    out = tmp_path / "run.vscope"
    proc = subprocess.run([sys.executable, "-m", "vramscope", "run", "-o", str(out), "--fail-on-leak", "--",
                           sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "vramscope: leak: +1.0 MiB/step at train.py:10 <module>" in proc.stderr
    assert "LEAK" in proc.stdout and "train.py:10" in proc.stdout
    assert out.exists()


# --- Memory outside torch's allocator (driver-level capture through CUPTI) and NVML's figure -----

LEAKY_EXT = r'''
#include <cuda_runtime.h>
#include <cstdint>
int64_t grab(int64_t bytes) { void* p = nullptr; cudaMalloc(&p, bytes); return int64_t(p); }
'''


def train_script(tmp_path, body: str, *, prelude: str = "") -> tuple[Path, Path, subprocess.CompletedProcess]:
    """Runs `body` (its steps under track(), `# LEAK` marking the leaking line) from a file, as a user's
    script; returns the trace, the script and the finished process."""
    out, script = tmp_path / "driver.vscope", tmp_path / "train.py"
    script.write_text("\n".join([
        "import sys, time, torch, vramscope",
        textwrap.dedent(prelude).strip(),
        'torch.cuda.init(); torch.ones(1, device="cuda")',
        "kept = []",
        f"with vramscope.track({str(out)!r}, summary=False):",
        "    for step in range(12):",
        textwrap.indent(textwrap.dedent(body).strip(), " " * 8),
        "        vramscope.step()",
    ]) + "\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, script, proc


def leak_line(script: Path) -> int:
    return next(i for i, line in enumerate(script.read_text().splitlines(), 1) if "# LEAK" in line)


def leak_of(f: dict, memory: str) -> dict:
    found = [l for l in f["leaks"] if l["memory"] == memory]
    assert found, f["leaks"]
    return found[0]


def test_driver_capture_records_an_extensions_cudamalloc_under_its_library_and_line(tmp_path):
    out, script, proc = train_script(tmp_path, "kept.append(ext.grab(1 << 20))  # LEAK", prelude=f"""
        from torch.utils.cpp_extension import load_inline
        ext = load_inline("vramscope_leaky_ext", cpp_sources={LEAKY_EXT!r}, functions=["grab"], with_cuda=True)
    """)
    assert "capturing torch's allocator, memory outside it (CUPTI" in proc.stderr, proc.stderr
    leak = leak_of(findings(out), "external")
    assert (leak["site"]["line"], Path(leak["site"]["file"]).name) == (leak_line(script), "train.py")
    assert "vramscope_leaky_ext" in leak["library"]
    assert leak["bytes_per_step"] == pytest.approx(1 << 20, rel=0.05)


def test_driver_capture_records_cupys_pool_growing(tmp_path):
    pytest.importorskip("cupy")
    out, script, _ = train_script(tmp_path, "kept.append(cupy.zeros(1 << 18, dtype=cupy.float32))  # LEAK",
                                  prelude="import cupy")
    leak = leak_of(findings(out), "external")
    assert leak["site"]["line"] == leak_line(script)
    assert leak["library"] == "CuPy"


def test_pinned_tensors_kept_each_step_are_a_pinned_leak(tmp_path):
    out, script, _ = train_script(tmp_path, "kept.append(torch.empty(1 << 20, dtype=torch.uint8, pin_memory=True))  # LEAK")
    leak = leak_of(findings(out), "pinned")
    assert leak["site"]["line"] == leak_line(script)


def test_torchs_own_segments_are_not_external(tmp_path):
    out, _, _ = train_script(tmp_path, "kept.append(torch.empty(16 << 20, dtype=torch.uint8, device='cuda'))  # LEAK")
    f = findings(out)
    assert f["verdict"] == "leak"
    assert {l["memory"] for l in f["leaks"]} == {"torch"}


def test_nvmls_figure_at_the_last_step_end_matches_pynvml(tmp_path):
    pynvml = pytest.importorskip("pynvml")
    # Fast steps: NVML is read a thousandth of the run's time at most, so most step ends read none,
    # and the reading at close stands for the last one.
    out, _, proc = train_script(tmp_path, """
        kept.append(torch.empty(32 << 20, dtype=torch.uint8, device="cuda"))
        if step == 11:
            torch.cuda.synchronize()
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
            mine = [p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid == os.getpid()]
            print("pynvml", mine[0] if mine else "absent")
    """, prelude="import os, pynvml")
    said = proc.stdout.split("pynvml")[1].split()[0]
    if said == "absent":  # another pid namespace: NVML lists the host's pids (the capture copes; this check cannot)
        pytest.skip("NVML does not list this process by its pid here")
    expected = int(said)
    usage = next(u for u in findings(out)["usage"] if u.get("device") == 0)
    assert usage["step"] == 11, usage
    assert abs(usage["nvml_used"] - expected) <= max(0.01 * expected, 64 << 20), (usage, expected)


def test_nvml_is_read_on_a_gpu_another_process_shares(tmp_path):
    """Another job on the same GPU (a second training, a notebook): this process is found in NVML's
    list at its reads, by its pid, and its own figure read, never the other's."""
    other = subprocess.Popen([sys.executable, "-c", "import sys, time, torch; x = torch.empty(1 << 30, dtype=torch.uint8, "
                              "device='cuda'); torch.cuda.synchronize(); print('ready', flush=True); time.sleep(120)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "ready"
        out, _, proc = train_script(tmp_path, """
            kept.append(torch.empty(32 << 20, dtype=torch.uint8, device="cuda"))
            time.sleep(0.03)
        """)
    finally:
        other.kill()
        other.wait()
    usage = next(u for u in findings(out)["usage"] if u.get("device") == 0)
    assert usage["nvml_used"] is not None, (usage, proc.stderr)
    # Its own: torch's reserved bytes and its context, never the other job's gigabyte beside them.
    assert usage["torch_reserved"] <= usage["nvml_used"] < usage["torch_reserved"] + (1 << 30), usage
    assert "not NVML's figure" not in proc.stderr, proc.stderr


def test_torch_profiler_gets_cupti_and_driver_capture_steps_aside(tmp_path):
    out, _, proc = train_script(tmp_path, """
        if step == 6:
            from torch.profiler import profile, ProfilerActivity
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                (torch.randn(256, 256, device="cuda") @ torch.randn(256, 256, device="cuda")).sum().item()
            kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            print("kernels", len(kernels))
        kept.append(torch.empty(1 << 20, device="cuda"))
    """)
    assert int(proc.stdout.split("kernels")[1].split()[0]) > 0, proc.stderr
    assert "torch.profiler records CUDA activity" in proc.stderr
    assert findings(out)["verdict"] == "leak"  # the capture of torch's allocator went on
