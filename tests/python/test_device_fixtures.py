"""The GPU recordings of memory outside torch's allocator (tests/data/device, recorded by
tests/data/record_device_fixtures.py): each trace analysed as users would, against the truth the
recording run read at every step end (NVML, torch's counters, the library's own counter), with
the owners the capture found while the run's objects lived. A fixture not recorded yet is
skipped; no GPU is needed to check a recorded one."""

import importlib.util
import json
from pathlib import Path

import pytest

from vramscope import _core, analyze

DATA = Path(__file__).resolve().parent.parent / "data"
DEVICE = DATA / "device"


def _recorder():
    spec = importlib.util.spec_from_file_location("record_device_fixtures", DATA / "record_device_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports no torch: only its scenario list is read
    return module


SCENARIOS = _recorder().SCENARIOS


def within(value: float, truth: float, share: float, floor: float = 0.0) -> bool:
    return abs(value - truth) <= max(share * abs(truth), floor)


class Fixture:
    """One recording: its truth, its findings (owners joined as the capture joins them) and the
    owners file."""

    def __init__(self, name: str):
        trace = DEVICE / f"{name}.vscope"
        if not trace.exists():
            pytest.skip(f"{trace.name} is not recorded yet (tests/data/record_device_fixtures.py --all on a GPU)")
        self.truth = json.loads((DEVICE / f"{name}.truth.json").read_text())
        self.expected = self.truth["expected"]
        owners = trace.with_name(trace.name + ".owners.json")
        self.owners = json.loads(owners.read_text()) if owners.exists() else []
        findings = analyze(trace)
        self.findings = json.loads(_core.attach_owners(json.dumps(findings), json.dumps(self.owners)))
        self.trace = trace

    def leaks_expected(self) -> list[dict]:
        """The findings' leaks of the expected memory and library."""
        leak = self.expected["leak"]
        return [f for f in self.findings["leaks"] if (f["memory"], f["library"]) == (leak["memory"], leak["library"])]


@pytest.fixture(params=SCENARIOS)
def fixture(request) -> Fixture:
    return Fixture(request.param)


def test_the_trace_is_small_and_saw_the_driver_and_nvml(fixture):
    assert fixture.trace.stat().st_size < 1 << 20
    meta = fixture.findings["meta"]
    assert meta["capture.driver"] == "cupti", meta
    assert meta["capture.nvml"].startswith("on"), meta


def test_the_verdict_is_the_truths(fixture):
    assert fixture.findings["verdict"] == fixture.expected["verdict"], fixture.findings["notes"]
    if fixture.expected["leak"] is None:
        leaks = fixture.findings["leaks"]
        assert leaks == [], [(f["memory"], f["library"], f["site"]) for f in leaks]


def test_the_leak_is_the_librarys_at_the_scenarios_line_at_its_rate(fixture):
    leak = fixture.expected["leak"]
    if leak is None:
        pytest.skip("a clean scenario: test_the_verdict_is_the_truths checks it has no leak")
    found = fixture.leaks_expected()
    assert found, [(f["memory"], f["library"], f["bytes_per_step"]) for f in fixture.findings["leaks"]]
    top = found[0]
    where = (Path(top["site"]["file"]).name, top["site"]["function"], top["site"]["line"])
    assert where in {(Path(s["file"]).name, s["function"], s["line"]) for s in leak["sites"]}, top["site"]
    # A library's memory may be taken at two lines of the scenario (NCCL: the group, its first
    # collective): the rate is theirs together.
    rate = sum(f["bytes_per_step"] for f in found)
    assert within(rate, leak["bytes_per_step"], 0.10), (rate, leak["bytes_per_step"])


def test_the_owner_is_the_one_the_scenario_keeps(fixture):
    leak = fixture.expected["leak"]
    if leak is None:
        pytest.skip("a clean scenario has no owner to find")
    top = fixture.leaks_expected()[0]
    if "starts" in leak["owner"]:
        paths = [o["path"] for o in top.get("owners", [])]
        assert paths and any(paths[0].startswith(s) for s in leak["owner"]["starts"]), paths
    else:  # no Python object: the owners file says so, for the same leak
        answer = next(a for a in fixture.owners if (a["site"]["line"], a["memory"], a["library"]) ==
                      (top["site"]["line"], top["memory"], top["library"]))
        assert answer["owners"] == [] and answer["note"] == leak["owner"]["note"], answer


def test_the_usage_ledger_sums_to_nvmls_figure_and_leaves_little_unexplained(fixture):
    ledgers = [u for u in fixture.findings["usage"] if u["device"] == 0]
    assert len(ledgers) == 1, fixture.findings["usage"]
    u = ledgers[0]
    assert u["nvml_used"] is not None, u
    parts = (u["torch_reserved"] + sum(lib["bytes"] for lib in u["libraries"]) + u["context"] + u["page_rounding"]
             + u["unexplained"])
    assert parts == u["nvml_used"], u
    tolerance = max(0.01 * u["nvml_used"], 64 << 20)
    truth = fixture.truth["steps"][u["step"]]
    assert within(u["nvml_used"], truth["nvml_used"], 0.01, 64 << 20), (u["nvml_used"], truth)
    assert within(u["torch_reserved"], truth["reserved"], 0.01, 2 << 20), (u["torch_reserved"], truth)
    assert abs(u["unexplained"]) <= tolerance, u


def test_the_ledger_names_what_the_library_holds(fixture):
    """The holder's bytes at the last step end against the library's own counter then: at least what
    the counter says (a library also holds memory of its own beside what the scenario keeps)."""
    leak = fixture.expected["leak"]
    if leak is None or leak["library"] == "NCCL":  # NCCL has no counter of its own
        pytest.skip("no library counter to compare with")
    device = None if leak["memory"] == _core.Memory.pinned.spelling else 0
    (u,) = [u for u in fixture.findings["usage"] if u["device"] == device]
    held = next(lib["bytes"] for lib in u["libraries"] if lib["library"] == leak["library"])
    counter = fixture.truth["steps"][u["step"]][leak["counter"]]
    assert held >= 0.9 * counter, (held, counter)
