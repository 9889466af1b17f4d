"""Armed runs: a process waits for an attach, records the steps after it, reports them itself, and
waits again; a process that was not armed is never signalled. On a CPU (live tensors) and, where
there is one, on a GPU (the allocator's capture) alike."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("torch")

from vramscope.capture import armed  # noqa: E402
from vramscope.capture.session import Capture, Source  # noqa: E402

# 64 KiB kept every optimizer step; READY with its pid once 200 steps are done; it stops when told.
LEAKING_LOOP = textwrap.dedent("""
    import os, sys, time, torch
    KEPT = []
    def main(stop_file):
        device = "cuda" if torch.cuda.is_available() else "cpu"  # the allocator's capture there, else live tensors
        model = torch.nn.Linear(64, 64).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        step = 0
        while not os.path.exists(stop_file) and step < 100_000:
            model(torch.randn(32, 64, device=device)).square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            KEPT.append(torch.empty(16 * 1024, device=device))
            step += 1
            if step == 200:
                print("READY", os.getpid(), flush=True)
            time.sleep(0.002)
        print("STEPS", step, flush=True)
    main(sys.argv[1])
""")
KEPT_LINE = next(n for n, line in enumerate(LEAKING_LOOP.splitlines(), 1) if "KEPT.append" in line)


def start_armed(tmp_path, steps: int) -> tuple[subprocess.Popen, int]:
    script = tmp_path / "leaking_loop.py"
    script.write_text(LEAKING_LOOP)
    run = subprocess.Popen([sys.executable, "-m", "vramscope", "run", "--armed", "--steps-after-attach", str(steps),
                            "-o", str(tmp_path / "run.vscope"), "--", sys.executable, str(script),
                            str(tmp_path / "stop")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert run.stdout is not None
    line = run.stdout.readline()
    assert line.startswith("READY"), line + run.stderr.read()
    return run, int(line.split()[1])


def attach(pid: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vramscope", "attach", str(pid), *args], capture_output=True,
                          text=True, timeout=300)


def test_an_attach_after_200_steps_finds_the_leak_and_its_owner_in_the_steps_it_recorded(tmp_path):
    run, pid = start_armed(tmp_path, steps=30)
    try:
        first = attach(pid)
        assert first.returncode == 0, first.stderr
        assert "records its next 30 steps (window 1" in first.stderr
        # What the process said at the window's end: the steps after the attach only, their leak
        # and who holds it, the 200 steps before being before the trace.
        assert "steps: 30, one per optimizer step" in first.stdout, first.stdout
        assert "LEAK  +64.0 KiB per optimizer step" in first.stdout, first.stdout
        assert f"leaking_loop.py:{KEPT_LINE} main" in first.stdout
        assert "__main__.KEPT[" in first.stdout, first.stdout
        # Back to waiting: a second attach records a second window.
        second = attach(pid)
        assert second.returncode == 0, second.stderr
        assert "window 2" in second.stderr and "LEAK  +64.0 KiB per optimizer step" in second.stdout
    finally:
        (tmp_path / "stop").touch()
        out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    assert "armed: waiting for `vramscope attach" in err
    steps = int(out.split("STEPS")[1])
    assert steps > 260  # the run went on through both windows
    assert "attached windows' traces" in err and "run.attach1.vscope" in err and "run.attach2.vscope" in err
    assert not armed.state_file(pid).exists()  # the process cleared its state at its end


def test_a_process_that_was_not_armed_is_not_signalled_and_the_answer_says_how_to_arm_it():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        answer = attach(sleeper.pid)
        assert answer.returncode == 2
        assert f"process {sleeper.pid} is not armed" in answer.stderr
        assert "vramscope run --armed -- COMMAND" in answer.stderr
        time.sleep(0.2)
        assert sleeper.poll() is None  # SIGUSR2's default action would have ended it
    finally:
        sleeper.kill()
        sleeper.wait()


def test_an_armed_run_with_a_step_limit_is_refused_before_it_starts(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "vramscope", "run", "--armed", "--max-steps", "10", "--", sys.executable,
                           "-c", "open('started', 'w')"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and "--max-steps" in proc.stderr and "armed" in proc.stderr
    assert not (tmp_path / "started").exists()


def test_an_attach_to_no_process_says_so():
    answer = attach(2 ** 22 + 7)  # above Linux's pid_max default
    assert answer.returncode == 2 and "no process" in answer.stderr


def test_a_window_stops_inside_an_optimizer_step_and_the_loop_goes_on(tmp_path):
    """The window ends in torch's loop over its optimizer hooks, with the user's own hook after
    the capture's: a hook removed from the dict torch iterates there breaks the user's step
    ("OrderedDict mutated during iteration")."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    model = torch.nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    stopped, users_steps = [], []
    windows = [Capture(tmp_path / f"w{k}.vscope", source=Source.live_tensors, summary=False, record_steps=5,
                       on_stop=stopped.append) for k in range(2)]
    for k, window in enumerate(windows):
        window.start()
        users_hook = register_optimizer_step_post_hook(lambda *args: users_steps.append(1))
        try:
            for _ in range(8):
                model(torch.randn(4, 16)).sum().backward()
                opt.step()
                opt.zero_grad()
        finally:
            users_hook.remove()
        assert stopped[k] is window and not window.active
        assert window.findings is not None and window.findings["steps"]["count"] == 5
    assert len(users_steps) == 16


def test_a_run_that_handles_the_attach_signal_itself_is_not_armed(tmp_path, capsys):
    previous = signal.signal(armed.ATTACH_SIGNAL, lambda *a: None)
    try:
        assert not armed.Armed(str(tmp_path / "run.vscope"), 10, {}).arm()
    finally:
        signal.signal(armed.ATTACH_SIGNAL, previous)
    assert "handles SIGUSR2 itself" in capsys.readouterr().err
    assert not armed.state_file(os.getpid()).exists()
