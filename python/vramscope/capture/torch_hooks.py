"""The Python-level events capture takes from torch and the frameworks over it: optimizer steps,
backward calls, stream creation, out-of-memory, and the loops with no optimizer (transformers'
evaluation, prediction and generate(), Lightning's validation, test and predict batches). Each
installer returns its undo; none of them raises into the run. A framework is never imported here:
its hooks go in when the run imports it (now, if it already has)."""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
from types import FrameType, ModuleType
from typing import Any, Callable, Sequence

Undo = Callable[[], None]
Function = Callable[..., Any]  # a function of torch's or a framework's, wrapped


def _wrap(owner: object, name: str, make: Callable[[Function], Function]) -> Undo:
    """Replaces the function `name` defined on `owner` (a class or module) by make(original); the
    undo puts the original back unless something else replaced the wrapper since."""
    original = vars(owner)[name]
    wrapper = functools.wraps(original)(make(original))
    setattr(owner, name, wrapper)

    def undo() -> None:
        if vars(owner).get(name) is wrapper:
            setattr(owner, name, original)

    return undo


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: hands the module's own spec on, its loader made to call `then(module)`
    once the module has run. Leaves sys.meta_path at its first use."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]):
        self.name, self.then = name, then

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != self.name:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:  # another thread's import took it first
            return None
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if loader is None or exec_module is None:
            return spec

        def exec_then(module: ModuleType) -> None:
            loader.exec_module = exec_module  # a loader may serve other modules: only this one is patched
            exec_module(module)
            self.then(module)

        loader.exec_module = exec_then
        return spec


def after_import(name: str, patch: Callable[[ModuleType], Undo], on_fault: Callable[[str], None]) -> Undo:
    """patch(module) once the module `name` is imported: now if it is, else when its import ends.
    A patch that fails is said to on_fault and changes nothing; the undo undoes a patch made, or
    stops waiting for the import."""
    undone: list[Undo] = []

    def apply(module: ModuleType) -> None:
        try:
            undone.append(patch(module))
        except Exception as e:
            on_fault(f"{name} could not be followed ({type(e).__name__}: {e})")

    waiting: _AfterImport | None = None
    if (module := sys.modules.get(name)) is not None:
        apply(module)
    else:
        waiting = _AfterImport(name, apply)
        sys.meta_path.insert(0, waiting)

    def undo() -> None:
        if waiting in sys.meta_path:
            sys.meta_path.remove(waiting)
        for u in undone:
            u()

    return undo


def _all(undos: list[Undo]) -> Undo:
    def undo() -> None:
        for u in reversed(undos):
            u()

    return undo


class _OptimizerHook:
    """One of torch.optim's global step hooks, registered once and never removed, calling what is
    subscribed now. torch loops over the live dict of its hooks: a hook removed or added from inside
    that loop (a capture that stops at a step end, an attach that starts one there) breaks the
    user's optimizer.step() with "OrderedDict mutated during iteration"."""

    def __init__(self, register_name: str):
        self._register_name = register_name
        self._callbacks: dict[int, Callable[[object], None]] = {}
        self._next = 0

    def subscribe(self, callback: Callable[[object], None]) -> Undo:
        if not self._next:
            import torch.optim.optimizer as optimizer_module

            getattr(optimizer_module, self._register_name)(self._call)
        self._next += 1
        key = self._next
        self._callbacks[key] = callback

        def undo() -> None:
            self._callbacks.pop(key, None)

        return undo

    def _call(self, optimizer: object, args: object, kwargs: object) -> None:
        for callback in tuple(self._callbacks.values()):
            callback(optimizer)


_after_step = _OptimizerHook("register_optimizer_step_post_hook")
_before_step = _OptimizerHook("register_optimizer_step_pre_hook")


def on_optimizer_step(callback: Callable[[object], None]) -> Undo:
    """After every optimizer's step()."""
    return _after_step.subscribe(callback)


def on_cuda_profiler_start(callback: Callable[[], None]) -> Undo:
    """Calls callback() before torch's profiler prepares or starts a trace with CUDA activities: its
    Kineto initialises CUPTI there, once for the process."""
    import torch.autograd.profiler as profiler

    def make(original: Function) -> Function:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            activities = args[1] if len(args) > 1 else kwargs.get("activities", ())
            try:
                if profiler.ProfilerActivity.CUDA in (activities or ()):
                    callback()
            except Exception:
                pass  # never the user's profiler's fault
            return original(*args, **kwargs)

        return wrapper

    return _all([_wrap(profiler, name, make) for name in ("_prepare_profiler", "_enable_profiler")
                 if name in vars(profiler)])


def on_optimizer_step_begins(callback: Callable[[object], None]) -> Undo:
    """Before every optimizer's step()."""
    return _before_step.subscribe(callback)


def on_first_forward(callback: Callable[[], bool]) -> Undo:
    """Before module calls until callback() says it took one (True): a global forward pre-hook that
    then removes itself (while one is registered, every module call takes torch's slower path)."""
    from torch.nn.modules.module import register_module_forward_pre_hook

    handle: Any = None  # torch's RemovableHandle, once registered

    def first(module: Any, args: Any) -> None:
        try:
            taken = callback()
        except Exception:
            taken = True  # never the user's forward's fault, nor a cost it keeps paying
        if taken:
            handle.remove()

    handle = register_module_forward_pre_hook(first)
    remove: Undo = handle.remove
    return remove


def on_module_calls(enter: Callable[[Any], None], leave: Callable[[Any], None]) -> Undo:
    """Around every module call: enter(module) before its forward runs, leave(module) once it returned
    or raised (global forward hooks: every module call then takes torch's slower path)."""
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    def before(module: Any, args: Any) -> None:
        enter(module)

    def after(module: Any, args: Any, output: Any) -> None:
        leave(module)

    handles = [register_module_forward_pre_hook(before), register_module_forward_hook(after, always_call=True)]

    def remove() -> None:
        for handle in handles:
            handle.remove()

    return remove


def on_backward(begins: Callable[[], None], ended: Callable[[], None]) -> Undo:
    """Around each torch.autograd.backward (which Tensor.backward and accelerate call): begins()
    before it runs, ended() once it returned."""
    import torch.autograd

    def make(backward: Function) -> Function:
        def around_backward(*args: Any, **kwargs: Any) -> Any:
            begins()
            result = backward(*args, **kwargs)
            ended()
            return result

        return around_backward

    return _wrap(torch.autograd, "backward", make)


def caller_label(skip_dirs: Sequence[str] = ("/torch/", "/vramscope/")) -> str:
    """file:line function of the innermost frame outside torch and vramscope."""
    frame: FrameType | None = sys._getframe(1)
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

    def __new__(klass: type, *args: Any, **kwargs: Any) -> Any:
        stream = original_fn(klass, *args, **kwargs)
        try:
            callback(int(stream.cuda_stream), "created at " + caller_label())
        except Exception:
            pass
        return stream

    cls.__new__ = staticmethod(__new__)

    def undo() -> None:
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

    def observer(device: int, alloc: int, device_allocated: int, device_free: int) -> None:
        if live[0]:
            try:
                callback(device, alloc, device_allocated, device_free)
            except Exception:
                pass

    attach(observer)
    return lambda: live.__setitem__(0, False)


def on_trainer_batches(eval_batch: Callable[[], None], predict_batch: Callable[[], None],
                       on_fault: Callable[[str], None]) -> Undo:
    """After each batch of transformers' Trainer.evaluate() (and the evaluation inside train()), and
    of Trainer.predict(): the point where the evaluation loop hands the batch to the callbacks
    (CallbackHandler.on_prediction_step), its outputs gathered; predict() says which of the two."""

    def patch(trainer_module: ModuleType) -> Undo:
        predicting = threading.local()

        def make_predict(predict: Function) -> Function:
            def counted_predict(*args: Any, **kwargs: Any) -> Any:
                predicting.depth = getattr(predicting, "depth", 0) + 1
                try:
                    return predict(*args, **kwargs)
                finally:
                    predicting.depth -= 1

            return counted_predict

        def make_prediction_step(on_prediction_step: Function) -> Function:
            def batch_ended(*args: Any, **kwargs: Any) -> Any:
                control = on_prediction_step(*args, **kwargs)
                (predict_batch if getattr(predicting, "depth", 0) else eval_batch)()
                return control

            return batch_ended

        return _all([_wrap(trainer_module.Trainer, "predict", make_predict),
                     _wrap(trainer_module.CallbackHandler, "on_prediction_step", make_prediction_step)])

    return after_import("transformers.trainer", patch, on_fault)


def on_generate(callback: Callable[[], None], on_fault: Callable[[str], None]) -> Undo:
    """After each call of transformers' generate() (GenerationMixin's, which every model's
    generate() reaches): the outermost only, as assisted decoding calls it again inside."""

    def patch(generation_utils: ModuleType) -> Undo:
        depth = threading.local()

        def make(generate: Function) -> Function:
            def outermost_generate(*args: Any, **kwargs: Any) -> Any:
                outermost = not getattr(depth, "calls", 0)
                depth.calls = getattr(depth, "calls", 0) + 1
                try:
                    result = generate(*args, **kwargs)
                finally:
                    depth.calls -= 1
                if outermost:
                    callback()
                return result

            return outermost_generate

        return _wrap(generation_utils.GenerationMixin, "generate", make)

    return after_import("transformers.generation.utils", patch, on_fault)


def on_lightning_batches(validation_batch: Callable[[], None], test_batch: Callable[[], None],
                         predict_batch: Callable[[], None], on_fault: Callable[[str], None]) -> Undo:
    """After each validation, test and predict batch of a Lightning Trainer (not the sanity check's),
    with or without vramscope's callback: once the batch-end callbacks ran. Lightning's loops call
    every callback hook through trainer.call._call_callback_hooks, of `lightning` and of the older
    `pytorch_lightning` alike."""
    ended = {"on_validation_batch_end": validation_batch, "on_test_batch_end": test_batch,
             "on_predict_batch_end": predict_batch}

    def patch(call_module: ModuleType) -> Undo:
        def make(call_callback_hooks: Function) -> Function:
            def batch_ended(trainer: Any, hook_name: str, *args: Any, **kwargs: Any) -> Any:
                result = call_callback_hooks(trainer, hook_name, *args, **kwargs)
                if hook_name in ended and not getattr(trainer, "sanity_checking", False):
                    ended[hook_name]()
                return result

            return batch_ended

        return _wrap(call_module, "_call_callback_hooks", make)

    return _all([after_import(f"{package}.trainer.call", patch, on_fault)
                 for package in ("lightning.pytorch", "pytorch_lightning")])
