"""The Python-level events capture takes from torch: optimizer steps, backward calls, stream
creation and out-of-memory. Each installer returns its undo; none of them raises into the run."""

from __future__ import annotations

import os
import sys
from typing import Callable

Undo = Callable[[], None]


def on_optimizer_step(callback: Callable[[object], None]) -> Undo:
    """torch.optim's global post-step hook: fires after every optimizer's step()."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    handle = register_optimizer_step_post_hook(lambda optimizer, args, kwargs: callback(optimizer))
    return handle.remove


def on_backward(callback: Callable[[], None]) -> Undo:
    """After each torch.autograd.backward (which Tensor.backward and accelerate call)."""
    import torch.autograd

    original = torch.autograd.backward

    def backward(*args, **kwargs):
        result = original(*args, **kwargs)
        callback()
        return result

    backward.__wrapped__ = original
    torch.autograd.backward = backward

    def undo():
        if torch.autograd.backward is backward:
            torch.autograd.backward = original

    return undo


def caller_label(skip_dirs=("/torch/", "/vramscope/")) -> str:
    """file:line function of the innermost frame outside torch and vramscope."""
    frame = sys._getframe(1)
    while frame is not None and any(d in frame.f_code.co_filename.replace(os.sep, "/") for d in skip_dirs):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} {frame.f_code.co_name}"


def on_stream_created(callback: Callable[[int, str], None]) -> Undo:
    """Names each torch.cuda.Stream by the line that created it (handle, label)."""
    import torch.cuda

    cls = torch.cuda.Stream
    original = cls.__dict__.get("__new__")
    if original is None:
        return lambda: None
    original_fn = original.__func__ if isinstance(original, staticmethod) else original

    def __new__(klass, *args, **kwargs):
        stream = original_fn(klass, *args, **kwargs)
        try:
            callback(int(stream.cuda_stream), "created at " + caller_label())
        except Exception:
            pass
        return stream

    cls.__new__ = staticmethod(__new__)

    def undo():
        cls.__new__ = original

    return undo


def on_out_of_memory(callback: Callable[[int, int, int, int], None]) -> Undo:
    """torch calls this with the GIL, after releasing the allocator's lock and before raising
    OutOfMemoryError: (device, bytes asked, bytes allocated, bytes free). It cannot be detached,
    so the undo only silences it."""
    import torch

    attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
    if attach is None:
        return lambda: None
    live = [True]

    def observer(device, alloc, device_allocated, device_free):
        if live[0]:
            try:
                callback(device, alloc, device_allocated, device_free)
            except Exception:
                pass

    attach(observer)
    return lambda: live.__setitem__(0, False)
