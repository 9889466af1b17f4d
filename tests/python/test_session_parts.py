"""The parts of a capture on their own: the step source's ranking and faults, and the reporter's owner
answers (live, at the end, and which of the two the end keeps), without torch's hooks or a search."""

import contextlib
import json

import pytest

from vramscope.capture.reporter import LiveReporter
from vramscope.capture.steps import StepSource, StepUnit
from vramscope.owners import leaks
from vramscope.owners.paths import OwnerPath

SITE = {"file": "train.py", "line": 7, "function": "step"}


class Optimizer:  # what the optimizer hook hands over: its parameter groups, and a weak reference
    def __init__(self, *parameters):
        self.param_groups = [{"params": list(parameters) or [object()]}]


def steps(**kw):
    ended, aside = [], []
    return StepSource(ended.append, aside.append, **kw), ended, aside


def test_a_weaker_source_never_ends_a_step_once_a_stronger_one_has():
    source, ended, _ = steps()
    for unit in [StepUnit.generate_call, StepUnit.eval_batch, StepUnit.predict_batch, StepUnit.optimizer,
                 StepUnit.eval_batch, StepUnit.explicit, StepUnit.optimizer]:
        source.ended(unit)
    assert ended == [StepUnit.generate_call, StepUnit.eval_batch, StepUnit.predict_batch, StepUnit.optimizer,
                     StepUnit.explicit]


def test_without_optimizer_steps_only_vramscope_step_counts():
    source, ended, _ = steps(optimizer_steps=False)
    source._on_optimizer_step(Optimizer())
    source.ended(StepUnit.explicit)
    assert ended == [StepUnit.explicit]


def test_the_first_optimizer_seen_owns_the_optimizer_steps():
    source, ended, _ = steps()
    first, second = Optimizer(), Optimizer()  # over other parameters: a GAN's two
    for optimizer in (first, second, first):
        source._on_optimizer_step(optimizer)
    assert ended == [StepUnit.optimizer, StepUnit.optimizer]


def test_an_optimizer_over_the_same_parameters_replaces_the_one_whose_steps_count():
    source, ended, aside = steps()
    weights = object()
    first, other = Optimizer(weights), Optimizer()
    rebuilt = Optimizer(weights)  # the next round's, over the same parameters
    for optimizer in (first, other, rebuilt, other, rebuilt):
        source._on_optimizer_step(optimizer)
    # first; rebuilt takes the role from it and keeps it; other, over other parameters, ends none.
    assert ended == [StepUnit.optimizer] * 3 and aside == []


def test_a_fault_at_a_step_end_steps_aside_and_never_raises():
    aside = []

    def broken(unit):
        raise ValueError("disk gone")

    StepSource(broken, aside.append).ended(StepUnit.optimizer)
    assert aside == ["capture stopped at a step end (ValueError: disk gone)"]


def reporter(**kw) -> LiveReporter:
    return LiveReporter(**{"device_type": "cuda", "live_warnings": False, "explain": True, "explain_budget": 1.0,
                           **kw})


def leak(rate, blocks=((4096, 1024),)):
    """A leak of the findings: one site per rate, its live blocks oldest first."""
    return {"site": {**SITE, "line": rate}, "device": 0, "bytes_per_step": rate,
            "live_blocks": [list(b) for b in blocks]}


@pytest.fixture
def searches(monkeypatch):
    """owners_of_blocks answered from a table: device block -> owners; each search recorded."""
    table, asked = {}, []

    def owners_of_blocks(device, blocks, *, budget, device_type):
        asked.append((tuple(blocks)[0], budget, device_type))
        return table.get(tuple(blocks)[0], ([], "no live tensor"))

    monkeypatch.setattr(leaks, "owners_of_blocks", owners_of_blocks)
    return table, asked


def test_a_live_answer_is_kept_once_per_site_and_said_with_live_warnings(searches, capsys):
    table, _ = searches
    table[(4096, 1024)] = ([OwnerPath("main() local 'kept'", [".append"], "Tensor")], "")
    said = reporter(live_warnings=True)
    live = {**leak(7), "blocks": [(4096, 1024)]}
    said.explain_live([live], 10, contextlib.nullcontext)
    said.explain_live([live], 12, contextlib.nullcontext)
    assert [e["found_at_step"] for e in said.live_owners] == [12]
    assert "vramscope:   held by main() local 'kept'.append" in capsys.readouterr().err


def test_a_cycle_at_the_end_yields_to_what_a_root_reached_live(searches):
    table, _ = searches
    said = reporter()
    table[(4096, 1024)] = ([OwnerPath("main() local 'kept'", [], "Tensor")], "")
    said.explain_live([{**leak(7), "blocks": [(4096, 1024)]}], 5, contextlib.nullcontext)
    table[(4096, 1024)] = ([OwnerPath("list", [], "Tensor", kind="cycle, freed only by gc")], "")
    (owner,) = said._owners_now_or_then([leak(7)], end_searches=3)
    assert owner["found_at_step"] == 5 and owner["owners"][0]["root"] == "main() local 'kept'"


def test_leaks_are_searched_largest_first_and_an_empty_budget_keeps_the_live_answer(searches):
    table, asked = searches
    said = reporter()
    table[(4096, 1024)] = ([OwnerPath("global 'cache'", [], "Tensor")], "")
    said.explain_live([{**leak(1), "blocks": [(4096, 1024)]}], 9, contextlib.nullcontext)
    small, large = leak(1), leak(100, [(8192, 1024)])
    assert [o["bytes_per_step"] for o in said._owners_now_or_then([small, large], end_searches=3)] == [100, 1]
    assert [a[0] for a in asked[1:]] == [(8192, 1024), (4096, 1024)]
    (kept,) = said._owners_now_or_then([small], end_searches=0)
    assert kept["found_at_step"] == 9 and kept["owners"][0]["root"] == "global 'cache'"


def test_without_analysis_the_report_is_the_monitors_last_word_and_the_owners_file(searches, tmp_path, capsys):
    path = str(tmp_path / "run.vscope")
    said = reporter(device_type="cpu")
    leaking = [{"site": SITE, "device": 0, "bytes_per_step": 64, "blocks": [(1, 2), (3, 4)],
                "line": "leak: +64 B/step at train.py:7 step (cuda:0, default stream)"}]
    said.tell(leaking)
    said.report(path, None, leaking, print_it=True, end_searches=3)
    err = capsys.readouterr().err
    assert "vramscope: leak: +64 B/step at train.py:7 step (cpu live tensors, default stream)" in err
    assert f"trace written to {path}" in err and said.findings is None
    assert json.loads(open(path + ".owners.json").read())[0]["note"] == "no live tensor"
    assert searches[1] == [((1, 2), 1.0, "cpu")]  # the monitor's newest block first, the source's device type


def test_driver_capture_lets_go_of_cupti_only_for_a_profiler_of_cuda_activity(monkeypatch):
    """CUPTI serves one client: the session's callback runs before torch's profiler prepares a trace
    with CUDA activities, never for a CPU-only one, and the profiler's own call always goes on."""
    torch = pytest.importorskip("torch")
    import torch.autograd.profiler as profiler

    from vramscope.capture import torch_hooks

    calls = []
    for name in ("_prepare_profiler", "_enable_profiler"):
        if name in vars(profiler):  # the profiler's entry points, recorded instead of run
            monkeypatch.setattr(profiler, name, lambda config, activities, *rest, _n=name: calls.append(_n))
    wrapped = [n for n in ("_prepare_profiler", "_enable_profiler") if n in vars(profiler)]
    assert wrapped, "torch's profiler entry points moved: the CUPTI hand-over needs a new place"
    undo = torch_hooks.on_cuda_profiler_start(lambda: calls.append("released"))
    try:
        getattr(profiler, wrapped[0])(None, {profiler.ProfilerActivity.CPU})
        assert calls == [wrapped[0]]
        getattr(profiler, wrapped[0])(None, {profiler.ProfilerActivity.CPU, profiler.ProfilerActivity.CUDA})
        assert calls == [wrapped[0], "released", wrapped[0]]
    finally:
        undo()
    getattr(profiler, wrapped[0])(None, {profiler.ProfilerActivity.CUDA})
    assert calls[-2:] == [wrapped[0], wrapped[0]] and calls.count("released") == 1  # undone: not released again


def test_a_weaker_sources_ends_are_units_inside_the_step_ranked_among_themselves():
    units = []
    source = StepSource(lambda unit: None, lambda why: None, end_unit=units.append)
    for unit in [StepUnit.optimizer, StepUnit.generate_call, StepUnit.eval_batch, StepUnit.generate_call,
                 StepUnit.eval_batch, StepUnit.optimizer, StepUnit.explicit, StepUnit.generate_call]:
        source.ended(unit)
    # Once an eval batch was a unit, the generate() calls inside eval batches are not; a new step
    # owner starts the units' ranking again, and the optimizer's steps inside its steps are none.
    assert units == [StepUnit.generate_call, StepUnit.eval_batch, StepUnit.eval_batch, StepUnit.generate_call]
