"""The pytest plugin (entry point pytest11): on with `--vramscope` or the ini option `vramscope = true`;
off, its markers do nothing and `vram_steps` only iterates. Plumbing only: the limits, their
wording and the check are limits.py's and check.py's.

    @pytest.mark.limit_gpu_leaks("1 MiB")            # bytes a step any allocation site may grow by
    @pytest.mark.limit_gpu_memory("2 GiB")           # peak allocated
    def test_training_does_not_leak(vram_steps):
        for batch in vram_steps(batches):            # a step ends after each item
            train_step(batch)

A test without `vram_steps` is called warmup + steps times (marker keywords), a step each; once when
only its peak is limited.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, TypeVar

import pytest

from .. import _core
from .check import STEPS, WARMUP, LeakCheck
from .limits import parse_size

LEAKS_MARKER = "limit_gpu_leaks"
MEMORY_MARKER = "limit_gpu_memory"
T = TypeVar("T")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("vramscope", "GPU memory leaks (vramscope)")
    group.addoption("--vramscope", action="store_true", default=False,
                    help="hold tests marked limit_gpu_leaks / limit_gpu_memory to their limits")
    parser.addini("vramscope", type="bool", default=False, help="the same as --vramscope")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{LEAKS_MARKER}(limit, steps={STEPS}, warmup={WARMUP}): fail when an "
                            "allocation site's surviving memory grows by more than `limit` a step (with --vramscope)")
    config.addinivalue_line("markers", f"{MEMORY_MARKER}(limit): fail when the peak allocated memory is over "
                            "`limit` (with --vramscope)")
    if config.getoption("vramscope") or config.getini("vramscope"):
        config.pluginmanager.register(LimitsPlugin(), "vramscope-limits")
    else:
        config.pluginmanager.register(UncheckedMarkers(), "vramscope-unchecked")


class UncheckedMarkers:
    """Without --vramscope the markers do nothing: one line at the end says so, never a silent pass."""

    def __init__(self) -> None:
        self.marked = 0

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.marked = sum(1 for item in items if item.get_closest_marker(LEAKS_MARKER) or
                          item.get_closest_marker(MEMORY_MARKER))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.marked:
            terminalreporter.write_line(f"vramscope: {self.marked} test(s) marked {LEAKS_MARKER} or {MEMORY_MARKER} "
                                        "were not checked (run pytest with --vramscope)")


class StepMarkers:
    """What `vram_steps` gives a test: `for x in vram_steps(items)` ends a step after each item (an int
    n: range(n)); the plugin points it at the check it runs, if any."""

    def __init__(self) -> None:
        self.check: LeakCheck | None = None

    def __call__(self, items: int | Iterable[T]) -> Iterator[int | T]:
        for item in range(items) if isinstance(items, int) else items:
            yield item
            if self.check is not None:
                self.check.step()


@pytest.fixture
def vram_steps() -> StepMarkers:
    return StepMarkers()


class LimitsPlugin:
    def __init__(self) -> None:
        self.outcomes: list[str] = []  # a line per marked test, for the summary

    @pytest.hookimpl(hookwrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Iterator[None]:
        leaks = pyfuncitem.get_closest_marker(LEAKS_MARKER)
        memory = pyfuncitem.get_closest_marker(MEMORY_MARKER)
        if leaks is None and memory is None:
            yield
            return
        options = dict(leaks.kwargs) if leaks is not None else {}
        try:
            warmup = _steps(options.pop("warmup", WARMUP), "warmup")
            steps = _steps(options.pop("steps", STEPS), "steps")
            check = LeakCheck(limit=_limit(leaks), peak_limit=_limit(memory), warmup=warmup)
            if options:
                raise TypeError(f"{LEAKS_MARKER}: unknown keyword(s) {', '.join(options)} (steps, warmup)")
            wrong = ""
        except (TypeError, ValueError) as e:  # the marker is wrong, not the test
            wrong = str(e)
        if wrong:  # failed outside the handler: pytest would show the message twice, chained
            self.outcomes.append(f"FAIL {pyfuncitem.nodeid}: {wrong}")
            pytest.fail(wrong, pytrace=False)
        markers = pyfuncitem.funcargs.get("vram_steps")
        test = pyfuncitem.obj

        def measured(**kwargs: Any) -> None:
            __tracebackhide__ = True
            check.start()
            try:
                if isinstance(markers, StepMarkers):
                    markers.check = check
                    test(**kwargs)
                else:  # the test body is one step, repeated when its leaks are judged
                    for _ in range(check.warmup + steps if leaks is not None else 1):
                        test(**kwargs)
                        check.step()
            finally:
                if isinstance(markers, StepMarkers):
                    markers.check = None
                check.stop()
            self.outcomes.append(f"{'FAIL' if check.failures else 'ok  '} {pyfuncitem.nodeid}: {_outcome(check)}")
            if check.failures:
                pyfuncitem.add_report_section("call", "vramscope", check.report())
            check.raise_failures(brief=True)

        pyfuncitem.obj = measured
        try:
            yield
        finally:
            pyfuncitem.obj = test

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.outcomes:
            return
        terminalreporter.write_sep("=", "vramscope")
        for line in self.outcomes:
            terminalreporter.write_line(line)


def _outcome(check: LeakCheck) -> str:
    """A checked test in the summary: its first failure, or what it held."""
    if check.failures:
        return check.failures[0].text.splitlines()[0]
    judged = check.judged
    if judged is None:
        return "not judged"
    said = f"peak {_core.format_bytes(judged.peak_allocated)} ({judged.how})"
    if check.limit is not None:
        worst = max((leak["bytes_per_step"] for leak in (judged.findings or {}).get("leaks", [])), default=0)
        said = (f"leaks +{_core.format_bytes(worst)}/step, within the limit" if worst else "no leak") + "; " + said
    return said


def _limit(marker: pytest.Mark | None) -> int | None:
    """The marker's limit in bytes; a bad size is an error naming the marker. None is refused: it
    would switch the check off, and a leaking test would pass."""
    if marker is None:
        return None
    if len(marker.args) != 1 or marker.args[0] is None:
        raise TypeError(f"{marker.name} takes one size, such as \"1 MiB\"; got {marker.args!r}")
    return parse_size(marker.args[0], marker.name)


def _steps(value: object, keyword: str) -> int:
    """A marker's steps or warmup: a whole number, named with its marker when it is not one."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"{LEAKS_MARKER}: {keyword}={value!r} is not a whole number of steps")
    return value
