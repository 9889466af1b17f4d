"""What both training callbacks do, apart from their framework: capture during training, and at each
optimizer step decide whether to stop, the same on every rank, before the run dies of OOM.

The decision reads the live monitor (the one judge, over the last 64 step ends): stop when its
projected OOM step is within `stop_within_steps` (None: never for that), or when a site leaks more
than `max_leak` a step (None: never for that).
Every rank takes part in the reduction at every step, whatever its own capture is doing, so a
distributed run never hangs on it. Never raises into the training loop: a fault is one warning,
then the guard steps aside (and still takes part in the reduction).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Callable

from .. import _core
from ..capture import Capture, Source, torch_hooks
from ..capture.say import warn
from ..prevent.limits import parse_size


class Guard:
    def __init__(self, output_dir: str | os.PathLike[str], *, stop_within_steps: int | None = 50,
                 max_leak: str | int | None = None, device_memory: str | int | None = None,
                 source: Source | None = None):
        self.output_dir = os.fspath(output_dir)
        self.stop_within_steps = stop_within_steps
        self.max_leak = None if max_leak is None else parse_size(max_leak, "max_leak")
        self.device_memory = 0 if device_memory is None else parse_size(device_memory, "device_memory")
        self.source = source
        self.capture: Capture | None = None
        self.reason = ""  # why the run was stopped, once it was
        self.report_paths: list[str] = []
        self.failed = False  # a fault in the decision: it says "go on" from then on
        self._undo_oom: Callable[[], None] | None = None

    def start(self) -> None:
        try:
            self.capture = Capture(os.path.join(self.output_dir, "vramscope.vscope"), device_memory=self.device_memory,
                                   source=self.source).start()
            self._undo_oom = torch_hooks.on_out_of_memory(lambda *_: self._write_reports())
        except Exception as e:
            warn(f"the training guard could not start ({type(e).__name__}: {e}); training goes on without it", "guard")

    def should_stop(self, step: int) -> bool:
        """After an optimizer step, on every rank: stop now? (reduced: any rank's reason stops all)."""
        reason = ""
        try:
            reason = "" if self.failed else self._local_reason(step)
        except Exception as e:  # the capture and its report go on; only the decision is given up
            warn(f"the training guard failed ({type(e).__name__}: {e}); it no longer stops the run", "guard")
            self.failed = True
        if not _any_rank(bool(reason)):
            return False
        self.reason = reason or "another rank's guard stopped the run"
        print(f"vramscope: stopping the run at step {step:,}: {self.reason}; a checkpoint is saved and the report "
              "written", file=sys.stderr, flush=True)
        return True

    def _local_reason(self, step: int) -> str:
        capture = self.capture
        if capture is None or not capture.active:
            return ""
        oom = capture.projected_oom_step()
        if oom is not None and self.stop_within_steps is not None and oom - capture.steps <= self.stop_within_steps:
            return (f"OOM projected at step {oom:,} of the capture, within {self.stop_within_steps} steps "
                    f"(now {capture.steps:,})")
        if self.max_leak is not None:
            for leak in capture.leaking():
                if leak["bytes_per_step"] > self.max_leak:
                    return f"{leak['line']}; over the limit of {_core.format_bytes(self.max_leak)}/step"
        return ""

    def finish(self) -> None:
        """Stops the capture (the analysis and who holds each leak, printed) and writes the report."""
        capture, self.capture = self.capture, None
        if self._undo_oom is not None:
            self._undo_oom()
        if capture is None:
            return
        try:
            capture.stop()
        except Exception as e:
            warn(f"the training guard could not finish its capture ({type(e).__name__}: {e})", "guard")
        self._write_reports(capture)

    def _write_reports(self, capture: Capture | None = None) -> None:
        """The findings as JSON and the HTML report beside the trace; at an OOM, before it is raised."""
        capture = capture or self.capture
        if capture is None or capture.findings is None or capture.path is None:
            return
        try:
            stem = capture.path.removesuffix(".vscope")
            options = _core.CommandOptions()
            options.json, options.html = stem + ".json", stem + ".html"
            # The capture's findings (owners joined), through the one reader; each file written whole.
            _core.read_findings(json.dumps(capture.findings), capture.path).write_outputs(options)
            self.report_paths = [options.json, options.html]
        except Exception as e:
            warn(f"could not write the report ({type(e).__name__}: {e})", "guard-report")


def _any_rank(flag: bool) -> bool:
    """`flag` OR-ed over the ranks of the default process group (the flag itself without one)."""
    try:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return flag
        import torch

        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
        value = torch.tensor([int(flag)], device=device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())
    except Exception as e:  # no torch.distributed here, or the group is gone: this rank decides alone
        if not isinstance(e, ImportError):
            warn(f"the training guard could not agree with the other ranks ({type(e).__name__}: {e})", "guard-ranks")
        return flag
