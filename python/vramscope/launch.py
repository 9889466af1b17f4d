"""`vramscope run -- COMMAND`: capture a training script with no change to its code.

The command runs as a child process with VRAMSCOPE_RUN set; vramscope_run.pth starts a capture in
each of its Python processes (each rank under torchrun writes its own file). When it exits, the
traces are analysed here and the exit code says what happened.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from . import _core
from .capture import naming


def why_no_trace(rc: int | None, output_of_command: str) -> str:
    """Why a command left no trace: its own failure first, then no torch, then no use of it."""
    if rc not in (0, None):
        return f"the command failed (exit code {rc}) before it wrote a trace: {output_of_command} says why"
    try:
        import torch
    except ImportError:
        return f"no trace was written: torch is not installed in {sys.executable}"
    used = ("CUDA through torch" if torch.cuda.is_available() else
            "torch (without CUDA vramscope records the tensors torch creates, and there were none)")
    return (f"no trace was written: the command did not use {used}, or its Python is not the one vramscope is "
            f"installed in ({sys.executable})")


def run_environment(output: Path, *, device_memory: int = 0, max_steps: int = 0, warmup: int = -1,
                    preload: Iterable[str] = (), base: Mapping[str, str] | None = None,
                    armed: int = 0) -> dict[str, Any]:
    """The environment under which vramscope_run.pth captures each Python process of a command
    started by this process; `warmup`: the analysis' (-1: the judge's default), so that the
    capture reads NVML at its end and the live monitor judges the steps the analysis will;
    `armed` > 0: each process waits for an attach, then records that many steps (capture/armed.py)."""
    env = dict(os.environ if base is None else base)
    env["VRAMSCOPE_RUN"] = json.dumps({"output": str(output), "launcher": os.getpid(), "device_memory": device_memory,
                                       "max_steps": max_steps, "warmup": warmup, "preload": list(preload),
                                       "armed": armed})
    return env


def run(command: list[str], output: str, max_steps: int, options: _core.CommandOptions, armed: int = 0) -> int:
    """Runs the command under capture, then analyses its traces once with `options` (analyze's,
    typed: _core.CommandOptions): the summary and who holds each leak printed, the report page and
    the findings JSON written whole or not at all. Armed (`armed` steps an attach), each process
    analysed its windows itself, so they are only listed."""
    if not command:
        print("vramscope run: no command given (vramscope run -- python train.py)\nTry 'vramscope run --help'.",
              file=sys.stderr)
        return 2
    if command[0].endswith(".py"):
        command = [sys.executable, *command]
    trace = Path(output).absolute()
    env = run_environment(trace, device_memory=options.device_memory, max_steps=max_steps, warmup=options.warmup,
                          armed=armed)
    started = time.time() - 1  # file times have coarse resolution on some filesystems
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as e:
        print(f"vramscope run: cannot start {_core.terminal_safe(command[0])}: {e}", file=sys.stderr)
        return 127
    # Ctrl-C reaches the child through the terminal; the launcher waits for it to finish.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        rc = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    files = naming.run_files(trace, started)
    if armed:
        said = ", ".join(str(f) for f in files) if files else "none: no process was attached"
        print(f"vramscope run: the attached windows' traces (each analysed as it ended): {said}", file=sys.stderr)
        return rc
    if not files:
        print(f"vramscope run: {why_no_trace(rc, 'its output above')}", file=sys.stderr)
        return rc or (2 if options.fail_on_leak else 0)
    options.html = options.html or str(trace.with_name(trace.name.removesuffix(naming.SUFFIX) + ".html"))
    options.skip_empty = True
    fail_on_leak, options.fail_on_leak = options.fail_on_leak, True  # to learn the verdict
    # Each trace is analysed here, once; its process found the owners while they lived.
    judged = _core.run_command("analyze", [str(f) for f in files], options)
    if judged not in (0, 1):
        print("vramscope run: the traces could not be judged (above: why); that is not 'no leak'", file=sys.stderr)
    print(f"\nvramscope: report {options.html}", flush=True)
    if rc != 0:
        return rc
    if not fail_on_leak:
        return 0
    return 1 if judged == 1 else 2 if judged != 0 else 0
