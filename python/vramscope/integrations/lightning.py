"""Lightning: `Trainer(..., callbacks=[VramscopeCallback()])`. Captures during training, says each leak
as it is confirmed, and when the projected OOM is near (or a leak is over its limit) saves a
checkpoint and sets `trainer.should_stop`; the report is written beside the trace, in
`DEFAULT_ROOT_DIR/vramscope/`, when training ends or fails (at an OOM, before it is raised).
`validate()`, `test()` and `predict()` run on their own are captured too, a step a batch, their
report in `DEFAULT_ROOT_DIR/vramscope/<validate|test|predict>/`."""

from __future__ import annotations

import os
from typing import Any

try:  # the `lightning` package, else the older `pytorch_lightning`: the Trainer accepts only its own Callback
    from lightning.pytorch import Callback
except ImportError:
    from pytorch_lightning import Callback

from ..capture import Source
from .guard import Guard


class VramscopeCallback(Callback):  # type: ignore[misc]  # Lightning is read as Any (pyproject.toml)
    def __init__(self, *, stop_within_steps: int | None = 50, max_leak: str | int | None = None,
                 device_memory: str | int | None = None, output_dir: str | os.PathLike[str] | None = None,
                 source: Source | None = None):
        """As vramscope.integrations.hf.VramscopeCallback's (output_dir defaults to the Trainer's
        default_root_dir/vramscope)."""
        self.options: dict[str, Any] = dict(stop_within_steps=stop_within_steps, max_leak=max_leak, device_memory=device_memory,
                         source=source)
        self.output_dir = output_dir
        self.guard: Guard | None = None
        self.checkpoint: str | None = None  # saved when the guard stopped the run
        self._last_step = -1

    def _start(self, trainer: Any, *subfolder: str) -> None:
        directory = os.path.join(self.output_dir or os.path.join(trainer.default_root_dir, "vramscope"), *subfolder)
        self.guard = Guard(directory, **self.options)
        self.guard.start()

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._start(trainer)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        # A loop with no optimizer: its batches end the steps (the capture follows Lightning's batch hooks).
        if stage != "fit":
            self._start(trainer, stage)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            self.on_train_end(trainer, pl_module)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        # Once per optimizer step (a batch may only accumulate gradients), on every rank alike.
        if self.guard is None or trainer.global_step == self._last_step:
            return
        self._last_step = trainer.global_step
        if self.guard.should_stop(trainer.global_step):
            self.checkpoint = os.path.join(trainer.default_root_dir, "checkpoints",
                                           f"vramscope-stop-step={trainer.global_step}.ckpt")
            trainer.save_checkpoint(self.checkpoint)
            trainer.should_stop = True

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.guard is not None:
            self.guard.finish()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.on_train_end(trainer, pl_module)
