"""`vramscope attach PID`: ask an armed process to record its next steps (capture/armed.py)."""

from __future__ import annotations

import argparse
import os
import sys
import time

from ..capture import armed

NAME = "attach"
HELP = """Ask an armed process to record its next steps, and print their summary. The process, started
by `vramscope run --armed`, records --steps-after-attach steps (default 50), analyses and reports
them, and waits again. An attach never signals a process that was not armed."""

POLL_SECONDS = 0.2


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pid", type=int, metavar="PID", help="the armed process (each rank is one)")
    parser.add_argument("--no-wait", action="store_true", help="ask, and return at once")
    parser.add_argument("--timeout", type=float, default=0.0, metavar="SECONDS",
                        help="stop waiting after this long (default: until the window ends)")


def not_armed(pid: int) -> str:
    return (f"vramscope attach: process {pid} is not armed (an attach would end it); start it with "
            f"`vramscope run --armed -- COMMAND`, which waits for an attach at little cost")


def run(args: argparse.Namespace) -> int:
    pid = args.pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        print(f"vramscope attach: no process {pid}", file=sys.stderr)
        return 2
    except PermissionError:
        print(f"vramscope attach: process {pid} is another user's", file=sys.stderr)
        return 2
    state = armed.read_state(pid)
    if state is None or not armed.catches_attach_signal(pid):
        print(not_armed(pid), file=sys.stderr)
        return 2
    if state["state"] == "recording":
        print(f"vramscope attach: process {pid} is recording window {state['windows']} already", file=sys.stderr)
        return 2
    window = int(state["windows"]) + 1
    os.kill(pid, armed.ATTACH_SIGNAL)
    trace = armed.window_path(state["output"], window)
    print(f"vramscope attach: process {pid} records its next {state['steps']:,} steps (window {window}: {trace})",
          file=sys.stderr)
    if args.no_wait:
        return 0
    deadline = time.monotonic() + args.timeout if args.timeout > 0 else None
    while deadline is None or time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        state = armed.read_state(pid)
        if state is None:
            print(f"vramscope attach: process {pid} ended before its window did; its trace holds what came",
                  file=sys.stderr)
            return 1
        last = state.get("last") or {}
        if last.get("window") == window:
            if last.get("off_reason"):
                print(f"vramscope attach: the window could not record: {last['off_reason']}", file=sys.stderr)
                return 1
            print(last.get("summary") or f"vramscope attach: window {window} written to {last.get('trace')}",
                  end="", flush=True)
            return 0
    print(f"vramscope attach: still recording after {args.timeout:g} s; the process reports when it ends",
          file=sys.stderr)
    return 0
