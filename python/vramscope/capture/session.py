"""A live capture of this process: `vramscope.track()` and what `vramscope run` starts.

Policy lives here (what a step is, when to warn, when to step aside); the plumbing is in
torch_hooks.py (Python-level events), hook.py (the allocator hook) and _core.Recorder (C++).
The rule above all: capture never breaks the run. Any fault is one warning, then capture stops
and training goes on untouched.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time
import weakref

from .. import _core
from . import naming, torch_hooks

MICROBATCH, ANNOTATION_START = 9, 10
_active: "Capture | None" = None
_last: "Capture | None" = None  # the latest capture started, for explain() after it ended
_retired: list = []  # recorders outlive their capture: a late allocator callback may still reach one
_warned: set = set()


class LeakError(AssertionError):
    """Raised at the end of `track(fail_on_leak=True)` when the run leaked."""


def warn(message: str, key: str | None = None) -> None:
    """Once per process and kind, on stderr, never raising."""
    key = key or message
    if key in _warned:
        return
    _warned.add(key)
    try:
        print(f"vramscope: {message}", file=sys.stderr, flush=True)
    except Exception:
        pass


class Capture:
    """Records every CUDA caching-allocator event of this process to a .vscope trace."""

    def __init__(self, path="vramscope.vscope", *, fail_on_leak=False, summary=True, live_warnings=True,
                 device_memory: int = 0, shared_name=True, explain=True):
        self.requested_path = os.fspath(path)
        self.path: str | None = None  # the file actually written (rank in its name)
        self.fail_on_leak = fail_on_leak
        self.summary = summary
        self.live_warnings = live_warnings
        self.device_memory = device_memory
        self.shared_name = shared_name
        self.explain = explain  # at the end, find who holds each leak (while the run's objects live)
        self.findings: dict | None = None
        self.owners: list[dict] = []
        self.leaked: bool | None = None
        self.allocations = 0  # allocation events captured
        self.live_leaks: list[str] = []
        self._recorder = None
        self._hook = None
        self._undo: list = []
        self._step_source = None  # the optimizer whose steps count, or "explicit"
        self._oom_reported = False

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        self.stop(raise_on_leak=exc_type is None)
        return False

    @property
    def active(self) -> bool:
        return self._recorder is not None

    def start(self) -> "Capture":
        global _active, _last
        try:
            import torch
        except ImportError:
            warn("torch is not installed: nothing to capture", "no-torch")
            return self
        try:
            if not torch.cuda.is_available():
                warn("no CUDA device is available, so there is no GPU memory to capture; the run goes on "
                     "without vramscope", "no-cuda")
                return self
            backend = torch.cuda.get_allocator_backend()
            if backend != "native":
                warn(f"PyTorch uses the {backend} allocator backend (PYTORCH_CUDA_ALLOC_CONF); vramscope captures "
                     "the native caching allocator only, so capture is off for this run", "backend")
                return self
            if _active is not None:
                warn("a capture is already running in this process; this one is ignored", "nested")
                return self
            _active = _last = self
            self._undo.append(torch_hooks.on_optimizer_step(self._on_optimizer_step))
            self._undo.append(torch_hooks.on_backward(self._on_backward))
            self._undo.append(torch_hooks.on_stream_created(self._on_stream))
            self._undo.append(torch_hooks.on_out_of_memory(self._on_oom))
            ref = weakref.ref(self)
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=lambda: (c := ref()) is not None and c._forked())
            # The per-device allocators exist only once CUDA is initialised: attach then.
            if torch.cuda.is_initialized():
                self._attach()
            else:
                torch.cuda._lazy_call(self._attach)
        except Exception as e:
            self._step_aside(f"capture could not start ({type(e).__name__}: {e})")
        return self

    def _attach(self) -> None:
        """Runs inside torch's CUDA initialisation when queued: must never raise."""
        try:
            if _active is not self:
                return
            from .hook import HookUnavailable, load_allocator_hook
            try:
                self._hook = load_allocator_hook()
            except HookUnavailable as e:
                return self._step_aside(str(e))
            path = naming.trace_path(self.requested_path, shared_name=self.shared_name)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                recorder = _core.Recorder(str(path))
            except Exception as e:
                return self._step_aside(f"cannot write the trace: {e}")
            problem = _core.python_frames_self_check()
            if problem:
                recorder.set_python_stacks(False)
                warn(f"Python stacks are off for this interpreter ({problem}); events are still captured",
                     "frames")
            self._describe(recorder)
            self.path = str(path)
            self._recorder = recorder
            recorder.activate()
            self._hook.install(_core.allocator_sink())
        except Exception as e:
            self._step_aside(f"capture could not attach ({type(e).__name__}: {e})")

    def _describe(self, recorder) -> None:
        import torch

        meta = {
            "command": json.dumps(sys.argv),
            "torch": torch.__version__,
            "cuda": str(torch.version.cuda),
            "python": platform.python_version(),
            "host": socket.gethostname(),
            "pid": str(os.getpid()),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "capture": "vramscope live",
        }
        for key, env in (("rank", "RANK"), ("world_size", "WORLD_SIZE"), ("local_rank", "LOCAL_RANK")):
            if os.environ.get(env) is not None:
                meta[key] = os.environ[env]
        for key, value in meta.items():
            recorder.meta(key, value)
        for d in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(d)
            recorder.meta(f"device.{d}", props.name)
            capacity = self.device_memory or props.total_memory
            recorder.device(d, capacity, torch.cuda.memory_allocated(d), torch.cuda.memory_reserved(d))
        recorder.name_stream(0, "default stream")

    def stop(self, raise_on_leak: bool = False) -> None:
        recorder, self._recorder = self._recorder, None
        self._teardown()
        if recorder is None:
            return
        self._retire(recorder)
        fault = ""
        try:
            self.allocations = recorder.allocations
            fault = recorder.fault()
            recorder.close()
        except Exception as e:
            fault = fault or f"could not finish the trace: {e}"
        if fault:
            warn(f"{fault}; the trace {self.path} holds what came before")
        if self.summary or self.explain or self.fail_on_leak:
            self._report(print_it=self.summary)
        if raise_on_leak and self.fail_on_leak and self.leaked:
            raise LeakError(f"vramscope: the run leaked GPU memory (trace: {self.path})")

    def _teardown(self) -> None:
        global _active
        if self._hook is not None:
            try:
                self._hook.uninstall()
            except Exception:
                pass
        for undo in reversed(self._undo):
            try:
                undo()
            except Exception:
                pass
        self._undo.clear()
        if _active is self:
            _active = None

    def _retire(self, recorder) -> None:
        recorder.deactivate()
        _retired.append(recorder)

    def _step_aside(self, why: str) -> None:
        warn(f"{why}; capture is off and the run goes on without it", "aside")
        recorder, self._recorder = self._recorder, None
        if recorder is not None:
            self._retire(recorder)
            try:
                recorder.close()
            except Exception:
                pass
        self._teardown()

    def _forked(self) -> None:
        """In a forked child (a DataLoader worker): the file and threads are the parent's."""
        global _active
        recorder, self._recorder = self._recorder, None
        if recorder is not None:
            recorder.deactivate()
            recorder.abandon()
            _retired.append(recorder)
        self._undo.clear()
        _active = None

    def flush(self) -> None:
        if self._recorder is not None:
            self._recorder.flush()

    def _report(self, print_it: bool) -> None:
        """Analyses the trace; while the run's objects still live, finds who holds each leak
        (also written beside the trace as OUT.owners.json, for `vramscope run`)."""
        try:
            text, findings = _core.summary(self.path, self.device_memory, False)
            self.findings = json.loads(findings)
            self.leaked = self.findings["verdict"] == "leak"
        except Exception as e:
            return warn(f"could not analyse {self.path}: {e}")
        if self.leaked and self.explain:
            try:
                from ..ownership.leaks import merge_owners, owners_of_leaks

                self.owners = owners_of_leaks(self.findings)
                merge_owners(self.findings, self.owners)
                with open(self.path + ".owners.json", "w") as f:
                    json.dump(self.owners, f, indent=1)
            except Exception as e:
                warn(f"could not find who holds the leaks ({type(e).__name__}: {e})", "owners")
        if print_it:
            from ..ownership.leaks import render_owners

            print(text + (render_owners(self.owners) if self.owners else ""), file=sys.stderr, end="", flush=True)
            print(f"vramscope: trace written to {self.path}  (vramscope analyze {self.path})",
                  file=sys.stderr, flush=True)

    # -- events ------------------------------------------------------------------------------
    def end_step(self) -> None:
        recorder = self._recorder
        if recorder is None:
            return
        try:
            for line in recorder.end_step():
                self.live_leaks.append(line)
                if self.live_warnings:
                    print(f"vramscope: {line}", file=sys.stderr, flush=True)
            fault = recorder.fault()
        except Exception as e:
            fault = f"capture stopped ({type(e).__name__}: {e})"
        if fault:
            self._step_aside(fault)

    def _on_optimizer_step(self, optimizer) -> None:
        if self._step_source is None:
            self._step_source = weakref.ref(optimizer)
        elif self._step_source == "explicit" or self._step_source() is not optimizer:
            return  # several optimizers: the first one's steps count
        self.end_step()

    def _on_backward(self) -> None:
        recorder = self._recorder
        if recorder is not None:
            recorder.marker(MICROBATCH, "backward")

    def _on_stream(self, handle: int, label: str) -> None:
        recorder = self._recorder
        if recorder is not None:
            recorder.name_stream(handle, label)

    def _on_oom(self, device, asked, allocated, free) -> None:
        recorder = self._recorder
        if recorder is None or self._oom_reported:
            return
        self._oom_reported = True
        recorder.flush()
        print(f"vramscope: CUDA out of memory on cuda:{device} at step {recorder.steps:,} (asked "
              f"{_core.format_bytes(asked)}, {_core.format_bytes(free)} free); the trace so far:",
              file=sys.stderr, flush=True)
        self._report(print_it=True)

    def explicit_step(self) -> None:
        self._step_source = "explicit"
        self.end_step()

    def mark(self, name: str) -> None:
        recorder = self._recorder
        if recorder is not None:
            recorder.marker(ANNOTATION_START, name)


def track(path="vramscope.vscope", *, fail_on_leak=False, summary=True, live_warnings=True,
          device_memory: int = 0, explain=True) -> Capture:
    """Capture GPU memory events of the code in the `with` block to `path` (rank in the name under
    torchrun). Steps come from torch.optim; warns as soon as a leak is confirmed; prints the analysis
    at the end with who holds each leak (explain=True). Never breaks the run: without CUDA, or on
    any fault, it warns once and steps aside."""
    return Capture(path, fail_on_leak=fail_on_leak, summary=summary, live_warnings=live_warnings,
                   device_memory=device_memory, explain=explain)


def step() -> None:
    """Ends a step, for loops without a torch.optim optimizer (then only these calls count)."""
    if _active is not None:
        _active.explicit_step()


def mark(name: str) -> None:
    """Puts a named marker in the trace (an eval, a checkpoint, a phase)."""
    if _active is not None:
        _active.mark(name)


def active() -> Capture | None:
    return _active


def last_capture() -> Capture | None:
    """The running capture, else the one that ran last."""
    return _active or _last
