"""A live capture of this process: `vramscope.track()` and what `vramscope run` starts.

Policy lives here (what a step is, when to warn, when to step aside); the plumbing is in
torch_hooks.py (Python-level events), hook.py (the allocator hook) and _core.Recorder (C++).
The rule above all: capture never breaks the run. Any fault is one warning, then capture stops
and training goes on untouched.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import platform
import socket
import sys
import time
import weakref

from .. import _core
from . import naming, torch_hooks

_active: "Capture | None" = None
_last: "Capture | None" = None  # the latest capture started, for explain() after it ended
_retired: list = []  # recorders outlive their capture: a late allocator callback may still reach one
_warned: set = set()


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


class StepUnit(enum.Enum):
    """What one step of a capture is, named by the source that ends it: (rank, the unit's name, which
    the step marker carries into the trace and the report says "per ..."). The policy: the strongest
    source seen owns the steps; once it has ended one, a weaker source never ends a step (sources
    of one rank all do: a predict() after an evaluate()). So an explicit vramscope.step() beats the
    optimizer, the optimizer beats the evaluation batches run inside training, and these the
    generate() calls a Seq2Seq evaluation makes in each batch."""

    explicit = (4, "vramscope.step()")
    optimizer = (3, "optimizer step")
    eval_batch = (2, "eval batch")
    predict_batch = (2, "predict batch")
    validation_batch = (2, "validation batch")
    test_batch = (2, "test batch")
    generate_call = (1, "generate() call")

    def __init__(self, rank: int, spelling: str):
        self.rank = rank
        self.spelling = spelling


class LeakError(AssertionError):
    """The run leaked: raised at the end of `track(fail_on_leak=True)`, and by `assert_no_leak` and the
    pytest markers when a site leaks more than their limit (the message is the finding)."""


class StepLimitReached(SystemExit):
    """Ends the process at the end of step N of a run given a step limit (`vramscope run
    --max-steps`, each cell of `vramscope compare`): exit code 0, the trace complete."""


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
                 device_memory: int = 0, shared_name=True, explain=True, explain_budget: float | None = None,
                 analyse_at_end=True, source: Source = Source.allocator, warmup: int = -1, optimizer_steps=True,
                 max_steps: int = 0):
        self.requested_path = os.fspath(path)
        self.path: str | None = None  # the file actually written (rank in its name)
        self.fail_on_leak = fail_on_leak
        self.summary = summary
        self.live_warnings = live_warnings
        self.device_memory = device_memory
        self.shared_name = shared_name
        self.analyse_at_end = analyse_at_end  # off under `vramscope run`: its launcher analyses each trace once
        self.source = source
        # The judge's settings, the live monitor's and the analysis' at the end alike: they agree.
        self.settings = _core.JudgeSettings()
        self.settings.warmup = warmup  # steps not judged at the start; -1: the judge's default
        self.max_steps = max_steps  # > 0: the process ends after this many steps (StepLimitReached)
        # Who holds each leak: searched on the training thread at the step a leak is confirmed, while
        # the loop's frames and locals live, and again at the end if its tensors are still there.
        self.explain = explain
        self.explain_budget = explain_budget if explain_budget is not None else _budget_from_env()
        self.live_owners: list[dict] = []  # ownership.leaks.explained(), one per site confirmed live
        self.findings: dict | None = None
        self.owners: list[dict] = []
        self.leaked: bool | None = None
        self.allocations = 0  # allocation events captured
        self.live_leaks: list[str] = []
        self._recorder = None
        self._hook = None
        self._tensors = None  # the live-tensor source, when that is what is recorded
        self._undo: list = []
        # The strongest step source seen (StepUnit); without optimizer_steps, vramscope.step() only.
        self._step_owner: StepUnit | None = None if optimizer_steps else StepUnit.explicit
        self._optimizer = None  # a weak reference to the optimizer whose steps count: the first one seen
        self._oom_reported = False
        self.off_reason = ""  # why this capture did not start, or stepped aside

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
            self._undo.append(torch_hooks.on_optimizer_step(self._on_optimizer_step))
            self._follow_loops_without_optimizer()
            self._undo.append(torch_hooks.on_backward(self._on_backward))
            self._undo.append(torch_hooks.on_stream_created(self._on_stream))
            self._undo.append(torch_hooks.on_out_of_memory(self._on_oom))
            ref = weakref.ref(self)
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=lambda: (c := ref()) is not None and c._forked())
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
        except Exception as e:
            self._step_aside(f"capture could not attach ({type(e).__name__}: {e})")

    def _attach_live_tensors(self) -> None:
        from .live_tensors import LiveTensors

        recorder = self._open_recorder()
        if recorder is not None:
            self._tensors = LiveTensors(recorder)
            self._tensors.start()
            self._undo.append(self._tensors.stop)

    def _open_recorder(self):
        """The recorder, described and ready; None when the trace cannot be written (stepped aside)."""
        path = naming.trace_path(self.requested_path, shared_name=self.shared_name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            recorder = _core.Recorder(str(path), self.settings)
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
        return recorder

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
            "capture": "vramscope live" if self.source is Source.allocator else "vramscope live tensors",
        }
        for key, env in (("rank", "RANK"), ("world_size", "WORLD_SIZE"), ("local_rank", "LOCAL_RANK")):
            if os.environ.get(env) is not None:
                meta[key] = os.environ[env]
        if "rank" not in meta and (rank := naming.process_rank()) is not None:  # a group up without RANK
            meta["rank"] = str(rank)
            meta["world_size"] = str(torch.distributed.get_world_size())
        for key, value in meta.items():
            recorder.meta(key, value)
        if self.source is Source.live_tensors:
            from .live_tensors import CPU_DEVICE

            recorder.meta(f"device.{CPU_DEVICE}", "cpu")
            recorder.device(CPU_DEVICE, 0, 0, 0, budget=self.device_memory)  # no capacity of its own
        else:
            # The trace keeps the device as it is; the user's device_memory is a budget that the live
            # monitor and the analysis at the end project against (a trace claiming less capacity
            # than it holds is a fault).
            for d in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(d)
                recorder.meta(f"device.{d}", props.name)
                recorder.device(d, _capacity(torch, d, props.total_memory), torch.cuda.memory_allocated(d),
                                torch.cuda.memory_reserved(d), budget=self.device_memory)
        recorder.name_stream(0, "default stream")

    def stop(self, raise_on_leak: bool = False) -> None:
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
        if self.allocations == 0 and not fault:
            self.path = None  # never allocated (a compile or data worker): no trace, nothing to say
            return
        if fault:
            warn(f"{fault}; the trace {self.path} holds what came before")
        self._report(print_it=self.summary, analyse=self.analyse_at_end, leaking=leaking)
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

    def _off(self, why: str, key: str) -> "Capture":
        """Capture never starts: said once per process, kept for whoever asks this capture."""
        self.off_reason = why
        warn(why, key)
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

    def _report(self, print_it: bool, analyse: bool = True, leaking: list | None = None) -> None:
        """Finds who holds each leak while the run's objects still live (written beside the trace as
        OUT.owners.json) and, with `analyse`, analyses the trace: the only analysis of this trace in
        this process. Without it (under `vramscope run`, whose launcher analyses each trace once) the
        leaks are the live monitor's last word, which the judge makes the same as the final table."""
        text = ""
        if analyse:
            try:
                text, findings = _core.summary(self.path, self.device_memory, False, self.settings)
                self.findings = json.loads(findings)
                self.leaked = self.findings["verdict"] == _core.Verdict.leak.spelling
            except Exception as e:
                return warn(f"could not analyse {self.path}, so the verdict is unknown (not 'no leak'): {e}")
            leaks = self.findings["leaks"]
        else:
            text = "".join(f"vramscope: {f['line']}\n" for f in leaking or [])
            leaks = [{"site": f["site"], "device": f["device"], "bytes_per_step": f["bytes_per_step"],
                      "live_blocks": [list(b) for b in reversed(f["blocks"])]} for f in leaking or []]
        if leaks and self.explain:
            try:
                self.owners = self._owners_now_or_then(leaks)
                if self.findings is not None:  # the one join of owners to findings (findings/json_reader.h)
                    self.findings = json.loads(_core.attach_owners(json.dumps(self.findings), json.dumps(self.owners)))
                with open(self.path + ".owners.json", "w") as f:
                    json.dump(self.owners, f, indent=1)
            except Exception as e:
                warn(f"could not find who holds the leaks ({type(e).__name__}: {e})", "owners")
        if print_it:
            from ..ownership.leaks import render_owners

            print(text + (render_owners(self.owners) if self.owners else ""), file=sys.stderr, end="", flush=True)
            print(f"vramscope: trace written to {self.path}  (vramscope analyze {self.path})",
                  file=sys.stderr, flush=True)

    def _owners_now_or_then(self, leaks: list[dict]) -> list[dict]:
        """Every leak's owners, largest first, as they are now; where none is found now (main() has
        returned) or the budget went to larger leaks, the answer found live, at the step the leak
        was confirmed. The searches together take at most END_SEARCHES budgets."""
        from ..ownership.leaks import explained, owners_of_blocks, same_site

        deadline = time.monotonic() + END_SEARCHES * self.explain_budget
        out = []
        for leak in sorted(leaks, key=lambda leak: -leak["bytes_per_step"]):
            blocks = [tuple(b) for b in leak.get("live_blocks", [])][::-1]  # newest first
            left = deadline - time.monotonic()
            if left > 0:
                owners, note = owners_of_blocks(leak["device"], blocks, budget=min(self.explain_budget, left),
                                                device_type=self._device_type)
            else:
                owners, note = [], (f"not searched at the end: the {END_SEARCHES * self.explain_budget:.1f} s "
                                    "budget went to larger leaks (VRAMSCOPE_EXPLAIN_BUDGET)")
            now = explained(leak["site"], leak["device"], leak["bytes_per_step"], owners, note)
            then = next((e for e in self.live_owners if same_site(e, now) and e["owners"]), None)
            # A cycle found now may only be what the training function left when it returned: what
            # a root reached while the run went on says who kept the memory then.
            reached_now = any(o.kind == "reachable" for o in owners)
            out.append(now if reached_now or then is None else {**then, "bytes_per_step": leak["bytes_per_step"]})
        return out

    def _follow_loops_without_optimizer(self) -> None:
        """Step sources beside the optimizer, each hooked when (if) the run imports its framework."""
        if self._step_owner is StepUnit.explicit:
            return  # nothing else can end a step
        ended = self._step_ended

        def cannot_follow(why: str) -> None:
            warn(f"{why}; those loops' batches will not be steps")

        self._undo += [
            torch_hooks.on_trainer_batches(lambda: ended(StepUnit.eval_batch), lambda: ended(StepUnit.predict_batch),
                                           cannot_follow),
            torch_hooks.on_generate(lambda: ended(StepUnit.generate_call), cannot_follow),
            torch_hooks.on_lightning_batches(lambda: ended(StepUnit.validation_batch),
                                             lambda: ended(StepUnit.test_batch),
                                             lambda: ended(StepUnit.predict_batch), cannot_follow),
        ]

    # -- events ------------------------------------------------------------------------------
    def _step_ended(self, unit: StepUnit) -> None:
        """A source says a step of its unit ended: the ranking (StepUnit) decides whether it is one.
        Called from inside the run's own loops: never raises."""
        try:
            if self._step_owner is not None and unit.rank < self._step_owner.rank:
                return
            self._step_owner = unit
            self.end_step(unit)
        except Exception as e:
            self._step_aside(f"capture stopped at a step end ({type(e).__name__}: {e})")

    def end_step(self, unit: StepUnit) -> None:
        recorder = self._recorder
        if recorder is None:
            return
        try:
            said = recorder.end_step(unit.spelling)
            for live in said:
                live["line"] = self._spoken(live)
                self.live_leaks.append(live["line"])
                if self.live_warnings:
                    print(f"vramscope: {live['line']}", file=sys.stderr, flush=True)
            fault = recorder.fault() or (self._tensors.fault if self._tensors is not None else "")
        except Exception as e:
            said, fault = [], f"capture stopped ({type(e).__name__}: {e})"
        if fault:
            return self._step_aside(fault)
        confirmed = [live for live in said if live["shape"].is_leak]
        if confirmed and self.explain:
            self._explain_live(confirmed, recorder.steps)
        if self.max_steps and recorder.steps >= self.max_steps:
            print(f"vramscope: step limit reached ({self.max_steps:,} steps): the run stops here", file=sys.stderr,
                  flush=True)
            self.stop()
            raise StepLimitReached(0)

    def _explain_live(self, confirmed: list[dict], step: int) -> None:
        """On the training thread, at the step a leak is confirmed: one search per new site, within
        the budget; the answer is kept for the end (when main()'s locals may be gone)."""
        from ..ownership.leaks import explained, owners_of_blocks, same_site

        for live in confirmed:
            try:
                with self._own_work():
                    owners, note = owners_of_blocks(live["device"], live["blocks"], budget=self.explain_budget,
                                                    device_type=self._device_type)
            except Exception as e:  # never the run's problem
                owners, note = [], f"the owner search failed ({type(e).__name__}: {e})"
            answer = explained(live["site"], live["device"], live["bytes_per_step"], owners, note, step)
            self.live_owners = [e for e in self.live_owners if not same_site(e, answer)] + [answer]
            if self.live_warnings:
                held = answer["owner_lines"][0] if owners else note
                print(f"vramscope:   held by {held}", file=sys.stderr, flush=True)

    @property
    def _device_type(self) -> str:
        return "cpu" if self.source is Source.live_tensors else "cuda"

    def _own_work(self):
        """vramscope's own tensors on the training thread are not the run's."""
        return self._tensors.paused() if self._tensors is not None else contextlib.nullcontext()

    def _spoken(self, live: dict) -> str:
        """The monitor's line, with the device spelled as this source records it."""
        if self.source is Source.live_tensors:
            return live["line"].replace(f"(cuda:{live['device']}", "(cpu live tensors", 1)
        return live["line"]

    def projected_oom_step(self) -> int | None:
        """The step at which a device runs out at the recent rates of the leaks held now (None: no
        leak, or no capacity); it follows the run, from the last step's peak."""
        recorder = self._recorder
        return recorder.projected_oom_step if recorder is not None else None

    def leaking(self) -> list[dict]:
        """The live monitor's last word: the sites it holds as leaking now (the dicts end_step says)."""
        recorder = self._recorder
        found = recorder.leaking() if recorder is not None else []
        for live in found:
            live["line"] = self._spoken(live)
        return found

    @property
    def steps(self) -> int:
        recorder = self._recorder
        return recorder.steps if recorder is not None else 0

    def _on_optimizer_step(self, optimizer) -> None:
        if self._optimizer is None:
            self._optimizer = weakref.ref(optimizer)
        elif self._optimizer() is not optimizer:
            return  # several optimizers: the first one's steps count (analysis/steps.h FirstOptimizer)
        self._step_ended(StepUnit.optimizer)

    def _on_backward(self) -> None:
        recorder = self._recorder
        if recorder is not None:
            recorder.marker(_core.EventKind.microbatch, "backward")

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
        self._report(print_it=True, analyse=self.analyse_at_end, leaking=recorder.leaking())

    def explicit_step(self) -> None:
        self._step_ended(StepUnit.explicit)

    def mark(self, name: str) -> None:
        recorder = self._recorder
        if recorder is not None:
            recorder.marker(_core.EventKind.annotation_start, name)


def _capacity(torch, device: int, total: int) -> int:
    """What this process may allocate on a device: its total, under a cap set with
    torch.cuda.set_per_process_memory_fraction (where this torch can say)."""
    fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    try:
        return int(total * fraction(device)) if fraction is not None else total
    except Exception:
        return total


def track(path="vramscope.vscope", *, fail_on_leak=False, summary=True, live_warnings=True,
          device_memory: int = 0, explain=True, explain_budget: float | None = None) -> Capture:
    """Capture GPU memory events of the code in the `with` block to `path` (rank in the name under
    torchrun). Steps come from torch.optim; warns as soon as a leak is confirmed and, with explain,
    finds who holds it right then (one search per new leak, at most explain_budget seconds, default
    VRAMSCOPE_EXPLAIN_BUDGET or 5); prints the analysis at the end. Never breaks the run: without
    CUDA, or on any fault, it warns once and steps aside."""
    return Capture(path, fail_on_leak=fail_on_leak, summary=summary, live_warnings=live_warnings,
                   device_memory=device_memory, explain=explain, explain_budget=explain_budget)


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
