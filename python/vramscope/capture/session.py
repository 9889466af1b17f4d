"""A live capture of this process: `vramscope.track()` and what `vramscope run` starts.

The session: it owns the recorder and the source that feeds it (hook.py's allocator hook or
live_tensors.py), starts and stops them, and steps aside on a fault or in a forked child. What a
step is lives in steps.py, what is said about leaks (live and at the end) in reporter.py.
The rule above all: capture never breaks the run. Any fault is one warning, then capture stops
and training goes on untouched.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import os
import threading
import types
import weakref
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Literal

from .. import _core
from . import describe as described, naming, torch_hooks
from .pools import PoolCounters
from .describe import describe
from .reporter import LiveReporter
from .say import say, warn
from .steps import StepSource, StepUnit

if TYPE_CHECKING:
    from .live_tensors import LiveTensors

_active: "Capture | None" = None
_last: "Capture | None" = None  # the latest capture started, for explain() after it ended
_retired: list[_core.Recorder] = []  # recorders outlive their capture: a late allocator callback may still reach one


END_SEARCHES = 3  # the owner searches at the end of a run take at most this many budgets together


def _budget_from_env() -> float:
    """Seconds one owner search may take (VRAMSCOPE_EXPLAIN_BUDGET, default 5)."""
    try:
        return max(0.1, float(os.environ.get("VRAMSCOPE_EXPLAIN_BUDGET", "5")))
    except ValueError:
        return 5.0


class Source(enum.Enum):
    """What a capture records. Both feed the same recorder, trace and judge."""

    allocator = "CUDA allocator events"  # every event of the caching allocator (the hook)
    live_tensors = "live tensors"  # without CUDA: tensor storages, created by ops, freed by their last reference

    @classmethod
    def here(cls) -> "Source":
        """The allocator where this process has CUDA; live tensors where it has none."""
        try:
            import torch

            return cls.allocator if torch.cuda.is_available() else cls.live_tensors
        except ImportError:
            return cls.allocator  # nothing to capture either way: start() says so

    @property
    def device_type(self) -> str:
        """Where the memory it records lives, as torch names the device type."""
        return "cpu" if self is Source.live_tensors else "cuda"


class LeakError(AssertionError):
    """The run leaked: raised at the end of `track(fail_on_leak=True)`, and by `assert_no_leak` and the
    pytest markers when a site leaks more than their limit (the message is the finding)."""


class StepLimitReached(SystemExit):
    """Ends the process at the end of step N of a run given a step limit (`vramscope run
    --max-steps`, each cell of `vramscope compare`): exit code 0, the trace complete."""


# The start line of a capture without CUDA, as the allocator's is sources_line().
LIVE_TENSORS_LINE = ("no CUDA here: capturing live tensors (each tensor storage torch's ops create on this thread, "
                     "with the line that created it, freed when its last reference goes)")


def _reported(name: str, doc: str) -> property:
    return property(lambda self: getattr(self._reporter, name), doc=doc)


class Capture:
    """Records every CUDA caching-allocator event of this process to a .vscope trace, or without CUDA
    the tensors this thread creates (source=None: Source.here() picks)."""

    def __init__(self, path: str | os.PathLike[str] = "vramscope.vscope", *, fail_on_leak: bool = False,
                 summary: bool = True, live_warnings: bool = True, device_memory: int = 0, shared_name: bool = True,
                 explain: bool = True, explain_budget: float | None = None, analyse_at_end: bool = True,
                 source: Source | None = None, warmup: int = -1, optimizer_steps: bool = True,
                 max_steps: int = 0, driver: bool | None = None, module_paths: bool | None = None,
                 record_steps: int = 0, on_stop: Callable[[Capture], None] | None = None):
        self.requested_path = os.fspath(path)
        self.path: str | None = None  # the file actually written (rank in its name)
        self.fail_on_leak = fail_on_leak
        self.summary = summary
        self.device_memory = device_memory
        self.shared_name = shared_name
        self.analyse_at_end = analyse_at_end  # off under `vramscope run`: its launcher analyses each trace once
        self.source = source or Source.here()
        self.live_warnings = live_warnings
        # The judge's settings, the live monitor's and the analysis' at the end alike: they agree.
        self.settings = _core.JudgeSettings()
        self.settings.warmup = warmup  # steps not judged at the start; -1: the judge's default
        self.max_steps = max_steps  # > 0: the process ends after this many steps (StepLimitReached)
        # > 0: the capture stops after this many steps, its trace analysed and reported, and the run
        # goes on (an armed run's window after an attach: armed.py).
        self.record_steps = record_steps
        self._on_stop = on_stop  # told once the capture stopped and reported
        # Memory outside torch's allocator through CUPTI (on unless driver=False or VRAMSCOPE_DRIVER=0).
        self.driver = described.driver_wanted(driver)
        # Each module call named by its instance path (model.layers.3.mlp) for the peak by module: off
        # unless module_paths=True or VRAMSCOPE_MODULE_PATHS=1, as it hooks every module call.
        self.module_paths = described.module_paths_wanted(module_paths)
        self._module_names: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._modules_open: list[Any] = []  # the module calls in progress on the thread that started it
        self._thread: threading.Thread | None = None
        self.allocations = 0  # allocation events captured
        # Who holds each leak: searched on the training thread at the step a leak is confirmed, while
        # the loop's frames and locals live, and again at the end if its tensors are still there.
        budget = explain_budget if explain_budget is not None else _budget_from_env()
        self._reporter = LiveReporter(device_type=self.source.device_type, live_warnings=live_warnings, explain=explain,
                                      explain_budget=budget)
        self._steps = StepSource(self.end_step, self._step_aside, optimizer_steps, end_unit=self._unit_ended)
        self._units: tuple[StepUnit | None, int] = (None, 0)  # the unit of the run in hand inside the step, and how many ended
        self._backward_in_step = False
        self._recorder: _core.Recorder | None = None
        self._hook: Any = None  # the allocator hook's extension module, once built
        self._tensors: LiveTensors | None = None  # the live-tensor source, when that is what is recorded
        self._undo: list[Callable[[], object]] = []
        self._oom_reported = False
        self._pools = PoolCounters()  # JAX's and CuPy's own counts, read at step ends (pools.py)
        self.off_reason = ""  # why this capture did not start, or stepped aside

    findings = _reported("findings", "The analysis at the end (docs/findings.md), owners joined; None before.")
    leaked = _reported("leaked", "Whether the analysis at the end found a leak; None: not analysed.")
    owners = _reported("owners", "Who holds each leak at the end (owners.leaks.explained()), largest first.")
    live_owners = _reported("live_owners", "Who held each leak at the step it was confirmed, one per site.")
    text = _reported("text", "The summary and owners the end of the trace said (printed with summary=True).")

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> Capture:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> Literal[False]:
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
            return self._off("torch is not installed: nothing to capture", "no-torch")
        try:
            if self.source is Source.allocator:  # live tensors need neither CUDA nor its allocator
                if not torch.cuda.is_available():
                    return self._off("no CUDA device is available, so there is no GPU memory to capture; the run "
                                     "goes on without vramscope", "no-cuda")
                if (backend := torch.cuda.get_allocator_backend()) != "native":
                    return self._off(f"PyTorch uses the {backend} allocator backend (PYTORCH_CUDA_ALLOC_CONF); "
                                     "vramscope captures the native caching allocator only, so capture is off for "
                                     "this run", "backend")
            if _active is not None:
                return self._off("a capture is already running in this process; this one is ignored", "nested")
            _active = _last = self
            self._thread = threading.current_thread()
            self._undo += self._steps.install()
            self._undo.append(torch_hooks.on_backward(self._on_backward_begins, self._on_backward))
            self._undo.append(torch_hooks.on_optimizer_step_begins(self._on_optimizer_step_begins))
            self._undo.append(torch_hooks.on_first_forward(self._on_first_forward))
            self._undo.append(torch_hooks.on_stream_created(self._on_stream))
            self._undo.append(torch_hooks.on_out_of_memory(self._on_oom))
            if self.module_paths:
                self._undo.append(torch_hooks.on_module_calls(self._on_module_enter, self._on_module_leave))
            ref = weakref.ref(self)
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=lambda: None if (c := ref()) is None else c._forked())
            if self.source is Source.live_tensors:
                self._attach_live_tensors()
            # The per-device allocators exist only once CUDA is initialised: attach then.
            elif torch.cuda.is_initialized():
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
            recorder = self._open_recorder()
            if recorder is not None:
                recorder.activate()
                self._hook.install(_core.allocator_sink())
                self._watch_outside_torch(recorder)
        except Exception as e:
            self._step_aside(f"capture could not attach ({type(e).__name__}: {e})")

    def _watch_outside_torch(self, recorder: _core.Recorder) -> None:
        """Memory taken from the driver outside torch's allocator (CUPTI) and NVML's figure for this
        process, each on where it can be; the start line says what is captured and why not."""
        import torch

        driver = described.DRIVER_OFF_BY_USER
        if self.driver:
            driver = f"off: {why}" if (why := recorder.start_driver_capture(described.cupti_dirs(torch))) else "cupti"
        if driver == "cupti":
            self._undo.append(recorder.stop_driver_capture)
            self._undo.append(torch_hooks.on_cuda_profiler_start(lambda: self._profiler_takes_cupti(recorder)))
        for d in described.used_devices(torch):
            recorder.watch_device(d, described.pci_bus_id(torch.cuda.get_device_properties(d)))
        recorder.meta("capture.driver", driver)
        recorder.meta("capture.nvml", recorder.nvml_state)
        say(described.sources_line(driver, recorder.nvml_state))

    def _profiler_takes_cupti(self, recorder: _core.Recorder) -> None:
        """torch.profiler is about to record CUDA activity: CUPTI takes one client, and a profiler
        that cannot have it records no kernel, so driver capture steps aside for good (the
        profiler keeps CUPTI) and the trace says from when."""
        if recorder is not self._recorder:
            return
        recorder.stop_driver_capture()
        recorder.meta("capture.driver", f"off: torch.profiler took CUPTI at step {recorder.steps}")
        warn(f"torch.profiler records CUDA activity and CUPTI serves one client: memory outside torch's "
             f"allocator is not captured from step {recorder.steps:,} on (NVML's figure goes on)", "profiler")

    def _attach_live_tensors(self) -> None:
        from .live_tensors import LiveTensors

        recorder = self._open_recorder()
        if recorder is not None:
            self._tensors = tensors = LiveTensors(recorder)
            tensors.start()
            self._undo.append(tensors.stop)
            if self.live_warnings:  # the checks say it in their verdicts instead
                say(LIVE_TENSORS_LINE)

    def _open_recorder(self) -> _core.Recorder | None:
        """The recorder, described and ready; None when the trace cannot be written (stepped aside)."""
        path = naming.trace_path(self.requested_path, shared_name=self.shared_name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            recorder = _core.Recorder(str(path), self.settings)
        except Exception as e:
            self._step_aside(f"cannot write the trace: {e}")
            return None
        problem = _core.python_frames_self_check()
        if problem:
            recorder.set_python_stacks(False)
            warn(f"Python stacks are off for this interpreter ({problem}); events are still captured",
                 "frames")
        describe(recorder, self.source is Source.live_tensors, self.device_memory)
        self.path = str(path)
        self._recorder = recorder
        return recorder

    def stop(self, raise_on_leak: bool = False) -> None:
        if self._recorder is not None:  # the last step ends' word, while the run's objects and hooks are there
            try:
                self._heard(self._recorder.said())
            except Exception:
                pass  # a fault is reported below
        recorder, self._recorder = self._recorder, None
        self._teardown()
        if recorder is None:
            return
        self._retire(recorder)
        fault, leaking = "", []
        try:
            self.allocations = recorder.allocations
            fault = recorder.fault()
            leaking = recorder.leaking()
            recorder.close()
        except Exception as e:
            fault = fault or f"could not finish the trace: {e}"
        if not fault and (self.path is None or not os.path.exists(self.path)):
            self.path = None  # never allocated (a compile or data worker): the recorder left no trace
            return self._told_stopped()
        if fault:
            warn(f"{fault}; the trace {self.path} holds what came before")
        self._report(self.summary, leaking)
        self._told_stopped()
        if raise_on_leak and self.fail_on_leak and self.leaked:
            leaked = "memory (live tensors)" if self.source is Source.live_tensors else "GPU memory"
            raise LeakError(f"vramscope: the run leaked {leaked} (trace: {self.path})")

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

    def _told_stopped(self) -> None:
        on_stop, self._on_stop = self._on_stop, None
        if on_stop is not None:
            try:
                on_stop(self)
            except Exception as e:
                warn(f"could not say the capture stopped ({type(e).__name__}: {e})", "on-stop")

    def _retire(self, recorder: _core.Recorder) -> None:
        recorder.deactivate()
        _retired.append(recorder)

    def _off(self, why: str, key: str) -> "Capture":
        """Capture never starts: said once per process, kept for whoever asks this capture."""
        self.off_reason = why
        warn(why, key)
        self._told_stopped()
        return self

    def _step_aside(self, why: str) -> None:
        self.off_reason = why
        warn(f"{why}; capture is off and the run goes on without it", "aside")
        recorder, self._recorder = self._recorder, None
        if recorder is not None:
            self._retire(recorder)
            try:
                recorder.close()
            except Exception:
                pass
        self._teardown()
        self._told_stopped()

    def _forked(self) -> None:
        """In a forked child (a DataLoader worker): the file and threads are the parent's."""
        global _active
        recorder, self._recorder = self._recorder, None
        if recorder is not None:
            recorder.deactivate()
            recorder.abandon()
            _retired.append(recorder)
        if self._tensors is not None:
            self._tensors.recording = False  # the forking thread's dispatch mode came along; it records nothing
        self._undo.clear()
        _active = None

    def flush(self) -> None:
        if self._recorder is not None:
            self._recorder.flush()

    def _report(self, print_it: bool, leaking: list[dict[str, Any]]) -> None:
        """The reporter's word on the trace so far; analysed here unless a launcher does it."""
        if self.path is None:  # no trace was opened
            return
        analyse = functools.partial(_core.summary, self.path, self.device_memory, False, self.settings)
        self._reporter.report(self.path, analyse if self.analyse_at_end else None, leaking, print_it, END_SEARCHES)

    # -- events ------------------------------------------------------------------------------
    def _step_ended(self, unit: StepUnit) -> None:
        """A source says a step of its unit ended (StepSource ranks it). Never raises."""
        self._steps.ended(unit)

    def end_step(self, unit: StepUnit) -> None:
        recorder = self._recorder
        if recorder is None:
            return
        try:
            # The monitor's word on the step ends before this one; the libraries' pools with this one.
            said = recorder.end_step(unit.spelling, self._pools.read())
            fault = recorder.fault() or (self._tensors.fault if self._tensors is not None else "")
        except Exception as e:
            said, fault = [], f"capture stopped ({type(e).__name__}: {e})"
        if fault:
            return self._step_aside(fault)
        self._units, self._backward_in_step = (None, 0), False
        self._heard(said)
        if self.max_steps and recorder.steps >= self.max_steps:
            say(f"step limit reached ({self.max_steps:,} steps): the run stops here")
            self.stop()
            raise StepLimitReached(0)
        if self.record_steps and recorder.steps >= self.record_steps:
            self.stop()

    def _heard(self, said: list[dict[str, Any]]) -> None:
        """What the live monitor said: told, and each leak it confirmed explained while it is held."""
        self._reporter.tell(said)
        recorder = self._recorder
        if recorder is None:
            return
        if confirmed := [live for live in said if live["shape"].is_leak]:
            # Its blocks as they are now: the word may come a step late, and a leak that grows by
            # replacement (a state concatenated onto a copy of itself) has freed the ones it named.
            from ..owners.leaks import same_site

            now = recorder.leaking()
            for live in confirmed:
                live["blocks"] = next((n["blocks"] for n in now if same_site(n, live)), live["blocks"])
            self._reporter.explain_live(confirmed, recorder.steps, self._own_work)

    def _own_work(self) -> ContextManager[None]:
        """vramscope's own tensors on the training thread are not the run's."""
        return self._tensors.paused() if self._tensors is not None else contextlib.nullcontext()

    def projected_oom_step(self) -> int | None:
        """The step at which a device runs out at the recent rates of the leaks held now (None: no
        leak, or no capacity); it follows the run, from the last step's peak."""
        recorder = self._recorder
        return recorder.projected_oom_step if recorder is not None else None

    def leaking(self) -> list[dict[str, Any]]:
        """The live monitor's last word: the sites it holds as leaking now (the dicts end_step says)."""
        recorder = self._recorder
        found: list[dict[str, Any]] = recorder.leaking() if recorder is not None else []
        for live in found:
            live["line"] = self._reporter.spoken(live)
        return found

    @property
    def steps(self) -> int:
        recorder = self._recorder
        return recorder.steps if recorder is not None else 0

    # The phases of a step (analysis/phases.h): a backward from its start to the microbatch marker,
    # an optimizer step from its start (torch's record_function name) to the step's end.
    def _on_first_forward(self) -> bool:
        """The first module call once the recorder runs (a model built on the CPU calls none on the GPU)."""
        recorder = self._recorder
        if recorder is None:
            return False
        recorder.marker(_core.EventKind.annotation_start, _core.FIRST_FORWARD_ANNOTATION)
        return True

    def _on_backward_begins(self) -> None:
        recorder = self._recorder
        if recorder is not None:
            recorder.marker(_core.EventKind.annotation_start, _core.BACKWARD_ANNOTATION)

    def _on_backward(self) -> None:
        recorder = self._recorder
        if recorder is not None:
            recorder.marker(_core.EventKind.microbatch, _core.BACKWARD_UNIT_MARKER)
            self._backward_in_step = True

    def _unit_ended(self, unit: StepUnit) -> None:
        """A weaker source's step end inside a step (an evaluation batch between optimizer steps): a
        unit, until a backward ends in the step (calls interleaved with backwards would cut the
        microbatches' run into runs of one). Its end is unmarked, so the owners of what rises across
        its units are searched at unit ends, at each power of two of them (a search per site, while
        the loop still holds them)."""
        recorder = self._recorder
        if recorder is None or self._backward_in_step:
            return
        recorder.marker(_core.EventKind.microbatch, unit.spelling)
        kind, count = self._units
        count = count + 1 if kind is unit else 1
        self._units = (unit, count)
        if count & (count - 1) == 0:
            self._rising_in_step(recorder, unit.spelling)

    def _rising_in_step(self, recorder: _core.Recorder, unit_marker: str) -> None:
        """At a leak inside the step's highest point: each site rising across the units said once, and
        its owners searched while the loop still holds what each unit kept."""
        reporter = self._reporter
        if not (reporter.explain or reporter.live_warnings):
            return
        try:
            rising = recorder.rising_in_step(unit_marker)
        except Exception as e:
            return self._step_aside(f"capture stopped ({type(e).__name__}: {e})")
        if rising:
            reporter.tell_within_step(rising)
            reporter.explain_within_step(rising, recorder.steps, self._own_work, _core.unit_of_marker(unit_marker))

    def _on_optimizer_step_begins(self, optimizer: Any) -> None:
        recorder = self._recorder
        if recorder is not None:
            self._rising_in_step(recorder, _core.BACKWARD_UNIT_MARKER)  # its microbatches are done
            if self._recorder is None:
                return
            name = type(optimizer).__name__
            recorder.marker(_core.EventKind.annotation_start, f"Optimizer.step#{name}.step")

    # Module paths (opt-in): an annotation opened and closed around each module call, named by the
    # module's instance path (analysis/peak.h ModuleStack reads them back).
    def _module_annotation(self, module: Any) -> str:
        name = self._module_names.get(module)
        if name is None:
            # A module first seen: its path under the innermost call in progress, else it is a root
            # and every module below it is named at once, by torch's own dotted names.
            parent = self._modules_open[-1] if self._modules_open else None
            if parent is None:
                root = type(module).__name__
                for dotted, child in module.named_modules():
                    self._module_names.setdefault(child, _core.MODULE_ANNOTATION_PREFIX + (f"{root}.{dotted}" if dotted else root))
            else:
                under = self._module_annotation(parent)
                child = next((n for n, m in parent.named_children() if m is module), type(module).__name__)
                self._module_names[module] = f"{under}.{child}"
            name = self._module_names[module]
        return name

    def _on_module_enter(self, module: Any) -> None:
        recorder = self._recorder
        if recorder is None or threading.current_thread() is not self._thread:
            return
        try:
            recorder.marker(_core.EventKind.annotation_start, self._module_annotation(module))
            self._modules_open.append(module)
        except Exception as e:
            self._step_aside(f"capture stopped at a module call ({type(e).__name__}: {e})")

    def _on_module_leave(self, module: Any) -> None:
        recorder = self._recorder
        if recorder is None or not self._modules_open or self._modules_open[-1] is not module:
            return
        self._modules_open.pop()
        recorder.marker(_core.EventKind.annotation_end, self._module_names[module])

    def _on_stream(self, handle: int, label: str) -> None:
        recorder = self._recorder
        if recorder is not None:
            recorder.name_stream(handle, label)

    def _on_oom(self, device: int, asked: int, allocated: int, free: int) -> None:
        recorder = self._recorder
        if recorder is None or self._oom_reported:
            return
        self._oom_reported = True
        recorder.flush()
        say(f"CUDA out of memory on cuda:{device} at step {recorder.steps:,} (asked {_core.format_bytes(asked)}, "
            f"{_core.format_bytes(free)} free); the trace so far:")
        self._report(True, recorder.leaking())

    def explicit_step(self) -> None:
        self._step_ended(StepUnit.explicit)

    def mark(self, name: str) -> None:
        recorder = self._recorder
        if recorder is not None:
            recorder.marker(_core.EventKind.annotation_start, name)


def track(path: str | os.PathLike[str] = "vramscope.vscope", *, fail_on_leak: bool = False, summary: bool = True,
          live_warnings: bool = True, device_memory: int = 0, explain: bool = True, explain_budget: float | None = None,
          driver: bool | None = None, module_paths: bool | None = None) -> Capture:
    """Capture GPU memory events of the code in the `with` block to `path` (rank in the name under
    torchrun). Steps come from torch.optim; warns as soon as a leak is confirmed and, with explain,
    finds who holds it right then (one search per new leak, at most explain_budget seconds, default
    VRAMSCOPE_EXPLAIN_BUDGET or 5); prints the analysis at the end. Memory outside torch's allocator
    (libraries' device memory, pinned host memory) is captured through CUPTI unless driver=False or
    VRAMSCOPE_DRIVER=0, and NVML's figure for the process is read at step ends. Without CUDA it
    records the tensors this thread creates instead (live tensors), and says so. With module_paths
    (or VRAMSCOPE_MODULE_PATHS=1) the peak by module names instances (model.layers.3.mlp), at the
    cost of a hook on every module call. Never breaks the run: on any fault it warns once and steps aside."""
    return Capture(path, fail_on_leak=fail_on_leak, summary=summary, live_warnings=live_warnings,
                   device_memory=device_memory, explain=explain, explain_budget=explain_budget, driver=driver,
                   module_paths=module_paths)


def step() -> None:
    """Ends a step where you count them ("vramscope.step()" in the report); from the first call on,
    only these calls end steps (not the optimizer, evaluation batches or generate() calls)."""
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
