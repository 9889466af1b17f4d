"""transformers' Trainer: `Trainer(..., callbacks=[VramscopeCallback()])`. Captures during training,
says each leak as it is confirmed, and when the projected OOM is near (or a leak is over its limit)
has the Trainer save a checkpoint and stop; the report is written beside the trace, in
`OUTPUT_DIR/vramscope/`, when training ends (or at an OOM, before it is raised)."""

from __future__ import annotations

import os
from typing import Any

from transformers import TrainerCallback

from ..capture import Source
from .guard import Guard


class VramscopeCallback(TrainerCallback):  # type: ignore[misc]  # transformers is read as Any (pyproject.toml)
    def __init__(self, *, stop_within_steps: int | None = 50, max_leak: str | int | None = None,
                 device_memory: str | int | None = None, output_dir: str | os.PathLike[str] | None = None,
                 source: Source | None = None):
        """stop_within_steps: stop when the projected OOM is this close; max_leak: stop when a site leaks
        more than this a step ("64 MiB"); device_memory: the capacity to project against (default:
        the device's, under torch.cuda.set_per_process_memory_fraction if set); output_dir: where the
        trace and report go (default: the Trainer's output_dir/vramscope); source: what is recorded
        (default: the CUDA allocator's events where there is CUDA, else live tensors; a CPU run on a
        machine with a GPU needs Source.live_tensors)."""
        self.options: dict[str, Any] = dict(stop_within_steps=stop_within_steps, max_leak=max_leak, device_memory=device_memory,
                         source=source)
        self.output_dir = output_dir
        self.guard: Guard | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.guard = Guard(self.output_dir or os.path.join(args.output_dir, "vramscope"), **self.options)
        self.guard.start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.guard is not None and self.guard.should_stop(state.global_step):
            control.should_save = True
            control.should_training_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.guard is not None:
            self.guard.finish()
