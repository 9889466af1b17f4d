"""`assert_no_leak`: a capture of steps that the caller drives, judged by the one analysis at its end
and held to limits (limits.py). With CUDA it records the allocator's events; without, the live
tensors, so a leak is testable on a CPU-only CI; the report says which.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import types
from typing import Any, Callable, Literal

from .. import _core
from ..capture import Capture, LeakError, Source
from .limits import Broken, Failure, Judged, failures, parse_size


class CannotJudgeError(AssertionError):
    """The check could not be made (too few steps, nothing captured): never a silent pass."""


class PeakError(AssertionError):
    """The peak allocated memory was over its limit."""


RAISED = {Broken.leak: LeakError, Broken.peak: PeakError, Broken.cannot_judge: CannotJudgeError}

# Judged steps of a check: the judge's minimum; its warm-up, what the judge gives a run that long,
# passed explicitly so that the live monitor and the analysis at the end skip the same steps.
STEPS = _core.JudgeSettings().min_steps
WARMUP = _core.JudgeSettings.warmup_for_judged(STEPS)


class LeakCheck:
    """Steps between `with` and its end, each closed by step(); at the end, a LeakError when a site
    leaks more than `limit` bytes a step (None: leaks are not checked) or the peak is over
    `peak_limit`. `warmup`: steps not judged (optimizer state, caches). The trace is kept for
    `vramscope analyze` when the check fails."""

    def __init__(self, *, limit: str | int | None = "1 MiB", warmup: int = WARMUP, peak_limit: str | int | None = None,
                 source: Source | None = None, explain: bool = True):
        self.limit = None if limit is None else parse_size(limit, "limit")
        self.peak_limit = None if peak_limit is None else parse_size(peak_limit, "peak_limit")
        self.warmup = warmup
        self.source = source or Source.here()
        self.explain = explain
        self.judged: Judged | None = None
        self.failures: list[Failure] = []
        self.trace: str | None = None  # kept when the check fails
        self._directory = ""
        self._capture: Capture | None = None
        self._torch_cuda = None  # torch.cuda, when the allocator is what is recorded

    def __enter__(self) -> "LeakCheck":
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> Literal[False]:
        self.stop()
        if exc_type is None:
            self.raise_failures()
        return False

    def start(self) -> "LeakCheck":
        self._directory = tempfile.mkdtemp(prefix="vramscope-check-")
        try:
            import torch
        except ImportError:  # the capture says so: nothing is judged, and the check cannot pass
            torch = None
        if torch is not None and self.source is Source.allocator and torch.cuda.is_available():
            self._torch_cuda = torch.cuda
            torch.cuda.reset_peak_memory_stats()
        self._capture = Capture(os.path.join(self._directory, "check.vscope"), summary=False, live_warnings=False,
                                shared_name=False, explain=self.explain, source=self.source,
                                warmup=self.warmup, optimizer_steps=False).start()
        return self

    def step(self) -> None:
        if self._capture is not None:
            self._capture.explicit_step()

    def stop(self) -> Judged:
        capture, self._capture = self._capture, None
        if capture is None:
            raise RuntimeError("LeakCheck.stop() without start()")
        capture.stop()
        findings = capture.findings
        problem = capture.off_reason or ("" if findings is not None else "nothing was allocated")
        self.judged = Judged(self.source, findings, self._peak(findings), problem)
        self.failures = failures(self.judged, leak_limit=self.limit, memory_limit=self.peak_limit)
        self.trace = capture.path
        if not self.failures:
            shutil.rmtree(self._directory, ignore_errors=True)
            self.trace = None
        return self.judged

    def _peak(self, findings: dict[str, Any] | None) -> int:
        """Peak allocated: the allocator's own count with CUDA (what the capture began with included);
        the live tensors' peak from the replay without."""
        if self._torch_cuda is not None:
            cuda = self._torch_cuda
            return max((cuda.max_memory_allocated(d) for d in range(cuda.device_count())), default=0)
        return max((p["peak_allocated"] for p in (findings or {}).get("timeline", [])), default=0)

    def report(self) -> str:
        text = "\n".join(f.text for f in self.failures)
        return text + (f"\ntrace: {self.trace}  (vramscope analyze {self.trace})" if self.trace else "")

    def raise_failures(self, brief: bool = False) -> None:
        """The first broken limit's error (LeakError for a leak), whose message is the whole report, or
        with `brief` its first line a failure (the report is shown elsewhere)."""
        __tracebackhide__ = True
        if self.failures:
            message = "\n".join(f.text.splitlines()[0] for f in self.failures) if brief else self.report()
            raise RAISED[self.failures[0].broken](message)


def assert_no_leak(fn: Callable[[], object] | None = None, *, steps: int = STEPS, warmup: int = WARMUP, limit: str | int = "1 MiB",
                   peak_limit: str | int | None = None) -> LeakCheck | None:
    """Calls `fn()` warmup + steps times, a step each, and raises LeakError (an AssertionError) whose
    message is the finding when a site's memory grows by more than `limit` a step. Without `fn`, the
    same check as a context manager whose steps the caller ends:

        with vramscope.assert_no_leak(limit="1 MiB") as check:
            for batch in batches:
                train_step(batch)
                check.step()
    """
    check = LeakCheck(limit=limit, warmup=warmup, peak_limit=peak_limit)
    if fn is None:
        return check
    with check:
        for _ in range(warmup + steps):
            fn()
            check.step()
    return None
