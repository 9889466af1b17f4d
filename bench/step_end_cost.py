"""What a step end costs the training thread under capture: the time spent in Capture.end_step
(the recorder's step end: NVML's read when due (capture/device_usage.h), and the marker queued
with its cuts, a drain only when the worker is behind; the monitor's word; the reporter), step by
step, beside the step itself, on capture_overhead.py's transformer; then the recorder's step end
alone, with NVML's read and without, and an NVML read alone.

  python bench/step_end_cost.py --steps 150          # VRAMSCOPE_DRIVER=0 turns driver capture off
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_overhead import workload  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=20)
    a = ap.parse_args()
    import torch
    import vramscope
    from vramscope.capture import session

    step = workload("transformer")
    spent: list[float] = []
    end_step = session.Capture.end_step

    def timed(self, unit):
        t0 = time.perf_counter()
        try:
            return end_step(self, unit)
        finally:
            spent.append(time.perf_counter() - t0)

    session.Capture.end_step = timed
    capture = vramscope.track(os.path.join(tempfile.mkdtemp(), "cost.vscope"), summary=False, live_warnings=False).start()
    recorder = capture._recorder
    capture._recorder = in_recorder = TimedRecorder(recorder)
    steps = []
    for i in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        steps.append(time.perf_counter() - t0)
    capture._recorder = recorder
    ends, whole = [1e3 * s for s in spent[a.warmup:]], [1e3 * s for s in steps[a.warmup:]]
    inside = [1e3 * s for s in in_recorder.spent[a.warmup:]]
    print(f"step {statistics.median(whole):.2f} ms (median of {len(whole)}); its step end "
          f"{statistics.median(ends):.3f} ms median, {statistics.mean(ends):.3f} mean, {max(ends):.3f} max "
          f"({100 * statistics.mean(ends) / statistics.median(whole):.2f} % of the step); of it, "
          f"Recorder.end_step (C++ and its binding) {statistics.median(inside):.3f} ms median")
    with_nvml, without = recorder_parts(recorder, a.steps)
    print(f"the recorder's step end: {with_nvml:.1f} us with NVML's read, {without:.1f} us without (NVML is read "
          f"when due: 20 ms apart at least, and a thousand times its last read's cost); an NVML read alone: {nvml_read_us(a.steps):.1f} us median")
    capture.stop()
    return 0


class TimedRecorder:
    """The capture's recorder, its end_step timed (the rest of Capture.end_step is Python's)."""

    def __init__(self, recorder):
        self._recorder, self.spent = recorder, []

    def end_step(self, unit):
        t0 = time.perf_counter()
        try:
            return self._recorder.end_step(unit)
        finally:
            self.spent.append(time.perf_counter() - t0)

    def __getattr__(self, name):
        return getattr(self._recorder, name)


def recorder_parts(recorder, pairs: int) -> tuple[float, float]:
    """The recorder's own step end (the C++ call alone), in µs: medians of `pairs` step ends 25 ms
    after the last, each followed 5 ms later by one that skips the read (NVML waits 20 ms at least;
    the worker, which drains every 2 ms, has taken the first by then, so neither drains). The first
    reads NVML only when due: with a read of 0.2 ms, about one in eight."""
    first, second = [], []
    for _ in range(pairs):
        for pause, times in ((0.025, first), (0.005, second)):
            time.sleep(pause)
            t0 = time.perf_counter()
            recorder.end_step("optimizer step")
            times.append(1e6 * (time.perf_counter() - t0))
    return statistics.median(first), statistics.median(second)


def nvml_read_us(reads: int) -> float:
    """What one NVML read of the device's processes takes (the call the recorder makes at a step
    end, through pynvml), in µs, each 25 ms after the last; nan without pynvml."""
    try:
        import pynvml
        import torch
    except ImportError:
        return float("nan")
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    times = []
    for _ in range(reads):
        time.sleep(0.025)
        t0 = time.perf_counter()
        pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        times.append(1e6 * (time.perf_counter() - t0))
    return statistics.median(times)


if __name__ == "__main__":
    sys.exit(main())
