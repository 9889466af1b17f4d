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

from . import _core
from .capture import naming

USAGE = """usage: vramscope run [-o OUT.vscope] [--fail-on-leak] [--device-memory SIZE] [--max-steps N] [--json OUT]
                     [--html OUT] -- COMMAND...

  Runs COMMAND (python train.py ..., torchrun ..., or a script.py) with live capture of every
  CUDA caching-allocator event, warns as soon as a leak is confirmed, and analyses the traces
  when it ends. Each process that uses CUDA writes OUT (default vramscope.vscope); under
  torchrun each rank writes OUT with .rankN in its name; the report page goes to OUT.html
  (--html to choose).
  --fail-on-leak   exit 1 when the run leaked, 2 when it could not be judged (the command's own
                   failure code wins)
  --max-steps N    end each process cleanly (exit 0) after N optimizer steps
"""


def parse(args: list[str]) -> tuple[dict, list[str]]:
    opts = {"output": "vramscope.vscope", "fail_on_leak": False, "device_memory": None, "json": None, "html": None,
            "max_steps": None}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return opts, args[i + 1:]
        if a in ("-o", "--output", "--device-memory", "--json", "--html", "--max-steps"):
            if i + 1 >= len(args):
                raise SystemExit(f"vramscope run: {a} needs a value\n\n{USAGE}")
            key = {"-o": "output", "--output": "output"}.get(a, a[2:].replace("-", "_"))
            opts[key] = args[i + 1]
            i += 2
        elif a == "--fail-on-leak":
            opts["fail_on_leak"] = True
            i += 1
        elif a in ("-h", "--help"):
            print(USAGE)
            raise SystemExit(0)
        elif a.startswith("-"):
            raise SystemExit(f"vramscope run: unknown option {a}\n\n{USAGE}")
        else:
            return opts, args[i:]
    return opts, []


def print_owners(files) -> None:
    """Who held each leak, as the launched processes found it before they exited."""
    from .ownership.leaks import render_owners

    for path in files:
        sidecar = Path(str(path) + ".owners.json")
        if sidecar.exists():
            try:
                text = render_owners(json.loads(sidecar.read_text()))
            except (ValueError, KeyError) as e:
                text = f"(unreadable {sidecar.name}: {e})\n"
            print(f"\n{path.name}: " + text, end="", flush=True)


def add_owners_to_json(path: Path, files) -> None:
    """The findings JSON the analysis wrote, with each leak's owners as its process found them."""
    from .ownership.leaks import merge_owners

    try:
        findings = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    runs = findings.get("runs", [findings])
    for run_findings, trace in zip(runs, files):
        sidecar = Path(str(trace) + ".owners.json")
        if sidecar.exists():
            merge_owners(run_findings, json.loads(sidecar.read_text()))
    path.write_text(json.dumps(findings, indent=1) + "\n")


def run_environment(output: Path, *, device_memory: int = 0, max_steps: int = 0, preload=(), base=None) -> dict:
    """The environment under which vramscope_run.pth captures each Python process of a command
    started by this process."""
    env = dict(os.environ if base is None else base)
    env["VRAMSCOPE_RUN"] = json.dumps({"output": str(output), "launcher": os.getpid(), "device_memory": device_memory,
                                       "max_steps": max_steps, "preload": list(preload)})
    return env


def run(args: list[str]) -> int:
    opts, command = parse(args)
    if not command:
        print(f"vramscope run: no command given\n\n{USAGE}", file=sys.stderr)
        return 2
    if command[0].endswith(".py"):
        command = [sys.executable, *command]
    try:
        device_memory = _core.parse_bytes(opts["device_memory"]) if opts["device_memory"] else 0
    except ValueError as e:
        print(f"vramscope run: --device-memory: {e}", file=sys.stderr)
        return 2
    max_steps = opts["max_steps"] or "0"
    if not max_steps.isdigit():
        print(f"vramscope run: --max-steps: {max_steps!r} is not a number of steps", file=sys.stderr)
        return 2
    output = Path(opts["output"]).absolute()
    env = run_environment(output, device_memory=device_memory, max_steps=int(max_steps))
    started = time.time() - 1  # file times have coarse resolution on some filesystems
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as e:
        print(f"vramscope run: cannot start {command[0]}: {e}", file=sys.stderr)
        return 127
    # Ctrl-C reaches the child through the terminal; the launcher waits for it to finish.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        rc = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    files = naming.run_files(output, started)
    if not files:
        print("vramscope run: no trace was written: the command did not use CUDA, or its Python is not the one "
              f"vramscope is installed in ({sys.executable})", file=sys.stderr)
        return rc
    html = opts["html"] or str(output.with_name(output.name.removesuffix(naming.SUFFIX) + ".html"))
    # Each trace is analysed here, once; its process found the owners while they lived.
    cli = ["analyze", *map(str, files), "--html", html, "--skip-empty"]
    if device_memory:
        cli += ["--device-memory", f"{device_memory}B"]
    if opts["json"]:
        cli += ["--json", opts["json"]]
    sys.stdout.flush()
    judged = _core.cli_main([*cli, "--fail-on-leak"])
    leaked = judged == 1
    if judged not in (0, 1):
        print("vramscope run: the traces could not be judged (above: why); that is not 'no leak'", file=sys.stderr)
    print_owners(files)
    print(f"\nvramscope: report {html}", flush=True)
    if opts["json"] and opts["json"] != "-":
        add_owners_to_json(Path(opts["json"]), files)
    if rc != 0:
        return rc
    if not opts["fail_on_leak"]:
        return 0
    return 1 if leaked else 2 if judged not in (0, 1) else 0
