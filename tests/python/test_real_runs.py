"""Leaks re-created from public bug reports, recorded live on a GPU (tests/data/real_runs, by
tests/data/record_real_runs.py), checked without a GPU against the truth the recording read from
torch and from the objects that leak: the verdict, the rate within 10 %, the site and the library
function of the growing stack, and the owner the capture found with every hop named. A fixture not
recorded yet is skipped."""

import importlib.util
import json
from pathlib import Path

import pytest

from vramscope import _core, analyze

DATA = Path(__file__).resolve().parent.parent / "data"
RUNS = DATA / "real_runs"


def _recorder():
    spec = importlib.util.spec_from_file_location("record_real_runs", DATA / "record_real_runs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports no torch: only its scenario list is read
    return module


SCENARIOS = _recorder().SCENARIOS


class Recording:
    def __init__(self, name: str):
        trace = RUNS / f"{name}.vscope"
        if not trace.exists():
            pytest.skip(f"{trace.name} is not recorded yet (tests/data/record_real_runs.py --all on a GPU)")
        self.truth = json.loads((RUNS / f"{name}.truth.json").read_text())
        self.expected = self.truth["expected"]
        owners = trace.with_name(trace.name + ".owners.json")
        self.owners = json.loads(owners.read_text()) if owners.exists() else []
        self.findings = json.loads(_core.attach_owners(json.dumps(analyze(trace)), json.dumps(self.owners)))
        self.trace = trace


@pytest.fixture(params=SCENARIOS)
def run(request) -> Recording:
    return Recording(request.param)


def test_the_trace_is_small(run):
    assert run.trace.stat().st_size < 1 << 20


def test_the_verdict_is_the_truths(run):
    assert run.findings["verdict"] == run.expected["verdict"], (run.findings["leaks"][:1], run.findings["notes"])


def top_leak(run: Recording) -> dict:
    """The largest leak, across steps or, where the truth says so, inside one (its rate per unit)."""
    if run.expected["verdict"] != "leak":
        pytest.skip("a clean twin: test_the_verdict_is_the_truths checks it")
    if run.expected.get("within_step"):
        assert run.findings["within_step"], run.findings["notes"]
        leak = max(run.findings["within_step"], key=lambda w: w["bytes_per_unit"])
        assert leak["unit"] == run.expected["unit"], leak
        return {**leak, "bytes_per_step": leak["bytes_per_unit"]}
    assert run.findings["leaks"], run.findings["notes"]
    return run.findings["leaks"][0]


def test_the_rate_is_the_truths_within_ten_percent(run):
    leak = top_leak(run)
    truth = run.expected["bytes_per_step"]
    assert abs(leak["bytes_per_step"] - truth) <= 0.10 * truth, (leak["bytes_per_step"], truth)


def test_the_site_and_the_library_function_are_the_growing_stacks(run):
    leak = top_leak(run)
    site = run.expected["site"]
    if site is not None:
        assert (leak["site"]["file"], leak["site"]["line"]) == (site["file"], site["line"]), leak["site"]
    function = run.expected["library_function"]
    if function is not None:
        if "allocated_in" in leak:  # a leak inside a step names its library function by its stack alone
            assert leak["allocated_in"] and leak["allocated_in"]["function"].split(".")[-1] == function, leak["allocated_in"]
        assert leak["stack"][leak["stack_shown_from"]]["function"].split(".")[-1] == function, leak["stack"][:4]


def test_the_owner_is_found_with_every_hop_named(run):
    leak = top_leak(run)
    lines = [owner["path"] for owner in leak.get("owners", [])]
    assert lines, f"no owner for {leak['site']}"
    assert any(all(part in line for part in run.expected["owner_contains"]) for line in lines), lines
    assert not any("<referent>" in line for line in lines), lines
    assert all("\n" not in line and len(line) < 300 for line in lines), lines  # a key named, not printed


def test_nvml_reads_this_process_beside_another():
    run = Recording("two_processes")
    steps = run.truth["steps"]
    if steps[-1]["nvml_used"] is None:
        pytest.skip("NVML does not list this process's pid on the recording machine (another pid namespace)")
    assert run.findings["meta"]["capture.nvml"].startswith("on"), run.findings["meta"]
    readings = [p["nvml_used"] for p in run.findings["timeline"] if p.get("nvml_used") is not None]
    assert len(readings) >= len(steps) // 2
    # This process's own figure, never the device's (the other process holds 1 GiB).
    assert max(readings) < steps[-1]["nvml_used"] + 256 * (1 << 20)


@pytest.mark.parametrize("name", ["jax_arrays_kept", "jax_prealloc_kept"])
def test_a_library_pools_leak_is_judged_by_its_own_count(name):
    """XLA's pool grows in doublings, or was taken at once: the leak is JAX's bytes in use, and the
    usage ledger splits JAX's part into in use and cached by its count."""
    run = Recording(name)
    leak = top_leak(run)
    assert leak["evidence"] == run.expected["evidence"] == "pool-in-use", leak["evidence"]
    assert (leak["memory"], leak["library"]) == ("external", "JAX/XLA")
    jax = [lib for u in run.findings["usage"] if u.get("device") == leak["device"] for lib in u["libraries"]
           if lib["library"] == "JAX/XLA"]
    assert jax and "in_use" in jax[0] and "cached" in jax[0], jax
    last = run.truth["steps"][-1]
    assert abs(jax[0]["in_use"] - last["kept"]) <= 0.10 * last["kept"], (jax[0], last)
