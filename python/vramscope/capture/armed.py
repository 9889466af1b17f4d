"""Armed runs, for jobs that run for days: a process of `vramscope run --armed` records nothing
until asked, then records its next N steps, analyses and reports them, and waits again.

How it is asked: SIGUSR2, which `vramscope attach PID` sends (or `kill -USR2 PID`). While it waits
the run's path holds nothing of vramscope's (the allocator hook is built and loaded, not attached;
no torch hook): only the signal handler, and a state file saying that this process is armed, how
many windows it recorded and where. A window is a capture started mid-run, so memory from before
it is "before trace", as in any trace that starts late; the judge needs no history before the attach.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import tempfile
import threading
from pathlib import Path
from typing import Any

from .naming import SUFFIX, without_suffix
from .say import say, warn

ATTACH_SIGNAL = signal.SIGUSR2
DEFAULT_STEPS = 50


def state_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"vramscope-{os.getuid()}" / "armed"


def state_file(pid: int) -> Path:
    return state_dir() / f"{pid}.json"


def read_state(pid: int) -> dict[str, Any] | None:
    """The armed process's state; None when it wrote none (never armed, or gone)."""
    try:
        state = json.loads(state_file(pid).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def catches_attach_signal(pid: int) -> bool:
    """Whether the process has a handler for the attach signal now (Linux: /proc/PID/status's SigCgt):
    without one, the signal's default action would end it."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (ATTACH_SIGNAL - 1) & 1)
    except (OSError, ValueError):
        pass
    return False


def window_path(output: str, window: int) -> str:
    """OUT.attachK.vscope: each window's own trace (the rank, if any, is added to it as usual)."""
    return f"{without_suffix(output)}.attach{window}{SUFFIX}"


class Armed:
    """One process's arming: the handler, the state file, and the window in hand."""

    def __init__(self, output: str, steps: int, capture_options: dict[str, Any]):
        self.output = output
        self.steps = steps
        self.capture_options = capture_options  # Capture's keyword arguments for each window
        self.windows = 0
        self.recording: Any = None  # the window's Capture while it records
        self.last: dict[str, Any] = {}  # the last window's trace and summary

    def arm(self) -> bool:
        """Installs the handler; False (said why) where this process cannot be armed."""
        if threading.current_thread() is not threading.main_thread():
            warn("an armed run must import torch on its main thread (signals are handled there); not armed",
                 "armed")
            return False
        if signal.getsignal(ATTACH_SIGNAL) not in (signal.SIG_DFL, None):
            warn(f"the run handles {ATTACH_SIGNAL.name} itself; this process is not armed", "armed")
            return False
        self._build_hook_now()
        signal.signal(ATTACH_SIGNAL, self._on_signal)
        atexit.register(self._disarm)
        self._write_state("armed")
        say(f"armed: waiting for `vramscope attach {os.getpid()}` to record {self.steps:,} steps")
        return True

    def _build_hook_now(self) -> None:
        """The allocator hook built (first use of this torch) and loaded, not installed: an attach
        must not stop the run for a build. A failure here is said again by the attach's capture."""
        from .session import Source

        if (self.capture_options.get("source") or Source.here()) is not Source.allocator:
            return
        from .hook import HookUnavailable, load_allocator_hook

        try:
            load_allocator_hook()
        except HookUnavailable:
            pass

    def _on_signal(self, signum: int, frame: object) -> None:
        """Runs on the main thread between two of the run's bytecodes: starts the window's capture,
        whose hooks may be added anywhere (torch_hooks keeps its optimizer hooks for that)."""
        try:
            if self.recording is not None:
                return say(f"attach: already recording window {self.windows}; this signal is ignored")
            from .session import Capture

            self.windows += 1
            capture = Capture(window_path(self.output, self.windows), record_steps=self.steps,
                              on_stop=self._window_ended, **self.capture_options)
            self.recording = capture
            capture.start()
            if self.recording is not capture:  # it could not start (said why), and said it stopped
                return
            self._write_state("recording")
            say(f"attached: recording the next {self.steps:,} steps (window {self.windows})")
        except Exception as e:  # never the run's problem
            self.recording = None
            warn(f"attach failed ({type(e).__name__}: {e}); the run goes on", "attach")

    def _window_ended(self, capture: Any) -> None:
        self.recording = None
        self.last = {"window": self.windows, "trace": capture.path, "summary": capture.text,
                     "off_reason": capture.off_reason}
        self._write_state("armed")

    def _disarm(self) -> None:
        capture = self.recording
        if capture is not None:
            capture.stop()
        try:
            state_file(os.getpid()).unlink()
        except OSError:
            pass

    def _write_state(self, state: str) -> None:
        try:
            path = state_file(os.getpid())
            path.parent.mkdir(parents=True, exist_ok=True)
            scratch = path.with_suffix(".tmp")
            scratch.write_text(json.dumps({"state": state, "steps": self.steps,
                                           "windows": self.windows, "output": self.output, "last": self.last}))
            scratch.replace(path)  # a reader never sees half of it
        except OSError as e:
            warn(f"cannot write the armed state ({e}); `vramscope attach` will not find this process", "armed-state")
