"""Where CUDA is absent: this thread's tensor storages as the events the allocator hook would send,
for the same recorder, monitor and judge. A storage is allocated when an op first returns a tensor
in it (stacked from the calling thread's frames, as the hook's events are) and freed when its
weakref callback runs, which is when the storage itself goes (views and autograd's saved tensors
keep it alive as they keep GPU blocks alive). Storages made before capture began, or outside torch's
dispatcher (`torch.from_numpy`), are not seen.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Iterator

from .. import _core

CPU_DEVICE = 0  # the trace's device number for host memory: a live-tensor trace has no other


def _mode_class() -> type[Any]:
    """The dispatch mode, defined on first use: `import vramscope` must not import torch."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class StorageEvents(TorchDispatchMode):  # type: ignore[misc]  # torch is read as Any (pyproject.toml)
        def __init__(self, source: "LiveTensors"):
            super().__init__()
            self.source = source

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if self.source.recording:
                for leaf in tree_leaves(out):
                    if isinstance(leaf, torch.Tensor):
                        self.source.created(leaf)
            return out

    return StorageEvents


class LiveTensors:
    """Feeds one recorder the storages created on this thread, between start() and stop()."""

    def __init__(self, recorder: _core.Recorder):
        self.recorder = recorder
        self.fault = ""  # the first internal error; recording stops there, the ops go on
        self.recording = False
        self._mode: Any = None  # torch's dispatch mode, while recording
        self._live: dict[int, weakref.ref[Any]] = {}  # data pointer -> the storage's weakref

    def start(self) -> None:
        self._mode = _mode_class()(self)
        self._mode.__enter__()
        self.recording = True

    def stop(self) -> None:
        self.recording = False
        mode, self._mode = self._mode, None
        if mode is not None:
            mode.__exit__(None, None, None)
        self._live.clear()  # a dropped weakref never calls back: nothing reaches a closed recorder

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """vramscope's own work on the training thread (the owner search) is not the run's memory."""
        was, self.recording = self.recording, False
        try:
            yield
        finally:
            self.recording = was and not self.fault

    def created(self, tensor: Any) -> None:
        try:
            storage = tensor.untyped_storage()
            ptr, size = storage.data_ptr(), storage.nbytes()
            if ptr == 0 or size == 0 or ptr in self._live:
                return  # no memory (empty, meta), or a view of a storage already seen
            self._live[ptr] = weakref.ref(storage, lambda _: self._freed(ptr, size))
            self.recorder.event(_core.EventKind.alloc, CPU_DEVICE, ptr, size)
        except Exception as e:  # a tensor without storage is skipped; anything else stops recording
            if not isinstance(e, (RuntimeError, NotImplementedError)):
                self.recording = False
                self.fault = self.fault or f"live-tensor capture failed ({type(e).__name__}: {e})"

    def _freed(self, ptr: int, size: int) -> None:
        if self._live.pop(ptr, None) is not None:
            self.recorder.event(_core.EventKind.free, CPU_DEVICE, ptr, size)
