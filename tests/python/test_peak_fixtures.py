"""The peak and growth inside a step on training loops with a truth from the model itself
(tests/data/record_peak_fixtures.py): the GPU recordings under tests/data/peak, checked without a
GPU, and the same loops recorded here on the CPU with live tensors. At the peak: parameters and
optimizer state within 2 % of their storages, activations within 10 % of what autograd saved;
checkpointing lowers the peak in activations, and so does seed 003's offload dedupe fix; seed 002's
kept losses are a leak inside the step at their rate; a clean accumulation is not."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from vramscope import _core, analyze

DATA = Path(__file__).resolve().parent.parent / "data"
RECORDER = DATA / "record_peak_fixtures.py"
MiB = 1 << 20


def _recorder():
    spec = importlib.util.spec_from_file_location("record_peak_fixtures", RECORDER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports no torch
    return module


def category(peak: dict, name: str) -> int:
    return next(c["bytes"] for c in peak["categories"] if c["category"] == name)


def within(value: float, truth: float, share: float) -> bool:
    return abs(value - truth) <= share * abs(truth)


class Recorded:
    def __init__(self, folder: Path, name: str):
        trace = folder / f"{name}.vscope"
        if not trace.exists():
            pytest.skip(f"{trace} is not recorded (tests/data/record_peak_fixtures.py --all on a GPU)")
        self.truth = json.loads((folder / f"{name}.truth.json").read_text())
        owners = trace.with_name(trace.name + ".owners.json")  # found while the run lived
        self.findings = analyze(trace)
        if owners.exists():
            self.findings = json.loads(_core.attach_owners(json.dumps(self.findings), owners.read_text()))
        (self.peak,) = self.findings["peak"]


def check_training_peak(folder: Path) -> None:
    plain, checkpointed = Recorded(folder, "peak_adamw"), Recorded(folder, "peak_adamw_checkpointed")
    for run in (plain, checkpointed):
        p, t = run.peak, run.truth
        assert sum(c["bytes"] for c in p["categories"]) == p["bytes"]
        assert p["backward_marked"]
        assert within(category(p, "parameters"), t["parameters"], 0.02), (category(p, "parameters"), t["parameters"])
        assert within(category(p, "optimizer-state"), t["optimizer_state"], 0.02)
        if t["device"] == "cuda":  # the allocator's own figure, to the block
            assert within(p["bytes"], max(t["max_memory_allocated"]), 0.001)
    p, t = plain.peak, plain.truth
    assert p["phase"] == "backward"
    # Told by module from the stack: the activations were allocated in the model's Block.forward.
    assert p["modules"][0]["module"] == "Block" and p["modules"][0]["category"] == "activations", p["modules"]
    assert within(category(p, "activations"), t["saved_for_backward"], 0.10), (category(p, "activations"), t["saved_for_backward"])
    # Checkpointing: the peak falls, and what fell is activations.
    saved = p["bytes"] - checkpointed.peak["bytes"]
    assert saved >= max(0.05 * p["bytes"], 64 * MiB / (8 if t["device"] == "cpu" else 1))
    assert category(p, "activations") - category(checkpointed.peak, "activations") >= 0.9 * saved


def check_within_step(folder: Path) -> None:
    kept, clean = Recorded(folder, "within_step_ctx"), Recorded(folder, "accum_clean")
    f, t = kept.findings, kept.truth
    assert f["verdict"] == "leak"
    (leak,) = f["within_step"]
    assert leak["site"]["line"] == _recorder_line("ctx_kept")
    assert within(leak["bytes_per_unit"], t["kept_per_microbatch"], 0.10)
    assert leak["units_per_step"] == t["microbatches"]
    assert leak["steps_seen"] == t["steps"]
    assert within(category(kept.peak, "leaks"), t["microbatches"] * t["kept_per_microbatch"], 0.10)
    assert not f["leaks"]  # no step end shows it
    # Held, at its highest point, by the losses kept with their grad_fn and the custom Function's ctx.
    paths = [o["path"] for o in leak.get("owners", [])]
    assert paths and "local 'losses'[" in paths[0] and paths[0].endswith(".kept"), paths
    assert not clean.findings["within_step"]
    assert category(clean.peak, "leaks") == 0


def check_offload_dedupe(folder: Path) -> None:
    """Seed 003: the dedupe map that outlived its tensors kept activations on the GPU; the fix lowers
    the peak, and what fell is activations."""
    bug, fixed = Recorded(folder, "offload_dedupe_bug"), Recorded(folder, "offload_dedupe_fixed")
    assert min(bug.truth["kept_on_gpu_per_forward"]) > 0 and max(fixed.truth["kept_on_gpu_per_forward"]) == 0
    for run in (bug, fixed):
        assert within(run.peak["bytes"], max(run.truth["max_memory_allocated"]), 0.001)
        assert not run.findings["leaks"] and not run.findings["within_step"]
    saved = bug.peak["bytes"] - fixed.peak["bytes"]
    assert saved >= max(0.05 * bug.peak["bytes"], 64 * MiB)
    assert category(bug.peak, "activations") - category(fixed.peak, "activations") >= saved


def _recorder_line(marker: str) -> int:
    tag = "# MARK: " + marker
    (line,) = [i for i, text in enumerate(RECORDER.read_text().splitlines(), 1) if text.rstrip().endswith(tag)]
    return line


def test_the_gpu_recordings_peak_is_named_by_category():
    check_training_peak(DATA / "peak")


def test_the_gpu_recordings_leak_inside_the_step_is_found():
    check_within_step(DATA / "peak")


def test_the_gpu_recordings_offload_dedupe_fix_lowers_the_peak_in_activations():
    check_offload_dedupe(DATA / "peak")


@pytest.fixture(scope="module")
def cpu_recordings(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("peak_cpu")
    subprocess.run([sys.executable, str(RECORDER), "--all", "--cpu", "--out", str(out)], check=True,
                   cwd=DATA.parent.parent, capture_output=True, timeout=600)
    return out


def test_the_same_loops_on_the_cpu_give_the_same_categories(cpu_recordings):
    check_training_peak(cpu_recordings)


def test_the_same_leak_inside_a_step_is_found_on_the_cpu(cpu_recordings):
    check_within_step(cpu_recordings)


def test_every_scenario_has_its_recording():
    assert sorted(p.name.removesuffix(".truth.json") for p in (DATA / "peak").glob("*.truth.json")) == sorted(_recorder().SCENARIOS)


MODULE_PATHS = """
import json, sys, torch
from vramscope.capture.session import Capture, Source

class MLP(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.up, self.down = torch.nn.Linear(64, width), torch.nn.Linear(width, 64)

    def forward(self, x):
        return self.down(self.up(x).relu())

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([MLP(256), MLP(1024)])  # one class, two sizes

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

model = Net()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
with Capture(sys.argv[1], source=Source.live_tensors, summary=False, live_warnings=False,
             module_paths=sys.argv[2] == "on") as capture:
    for _ in range(4):
        model(torch.randn(512, 64)).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
print(json.dumps(capture.findings["peak"][0]["modules"]))
"""


@pytest.mark.parametrize("paths", ["on", "off"])
def test_module_paths_name_each_instance_at_the_peak_and_without_them_its_class(tmp_path, paths):
    """Opt-in: a hook on every module call names each instance; without it, the class in the stack."""
    proc = subprocess.run([sys.executable, "-c", MODULE_PATHS, str(tmp_path / "modules.vscope"), paths],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    modules = {m["module"]: m["bytes"] for m in json.loads(proc.stdout.splitlines()[-1])}
    if paths == "off":
        assert "MLP" in modules and not any(name.startswith("Net.layers") for name in modules), modules
        return
    # The peak falls in backward: each MLP's own forward (its relu) keeps its output for backward,
    # 512 rows of its width in float32; the Linears inside it are modules of their own.
    assert modules.get("Net.layers.1") == 512 * 1024 * 4, modules
    assert modules.get("Net.layers.0") == 512 * 256 * 4, modules
    assert "Net.layers.1.up" in modules and "MLP" not in modules, modules
