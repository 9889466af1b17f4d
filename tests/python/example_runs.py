"""The examples/ folder run as a user runs it, on the CPU, and what each must print. The checks are
shared by test_examples.py (this interpreter) and test_fresh_install.py (a new virtual environment)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
LIVE_TENSORS = "vramscope: no CUDA here: capturing live tensors"


@dataclass
class User:
    """A shell whose PATH starts with `bin` (a Python with vramscope installed, and its `vramscope`),
    in a copy of examples/ of its own."""

    bin: Path
    folder: Path

    @classmethod
    def with_examples(cls, bin: Path, where: Path) -> "User":
        folder = where / "examples"
        shutil.copytree(EXAMPLES, folder)
        return cls(bin, folder)

    def run(self, *command: str, rc: int = 0, timeout: int = 300) -> subprocess.CompletedProcess:
        """The command run in the copy, its exit code checked."""
        env = {**os.environ, "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}"}
        env.pop("VRAMSCOPE_RUN", None)
        proc = subprocess.run(command, cwd=self.folder, env=env, capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == rc, f"{' '.join(command)}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc


def leak_site() -> str:
    """Where the leaked activation is allocated: toy_model.py's forward, the line that calls KeepSiLU."""
    lines = (EXAMPLES / "toy_model.py").read_text().splitlines()
    # A live capture names a method with its class.
    return f"toy_model.py:{next(i for i, l in enumerate(lines, 1) if 'KeepSiLU.apply' in l)} ToyModel.forward"


def said_first(stderr: str) -> str:
    """The first line vramscope says (a library may warn before it)."""
    return next((line for line in stderr.splitlines() if line.startswith("vramscope")), "")


def check_the_leak_is_found_with_its_owner(user: User) -> None:
    proc = user.run("vramscope", "run", "--", "python", "train_leak.py")
    out = proc.stdout + proc.stderr
    assert said_first(proc.stderr).startswith(LIVE_TENSORS), proc.stderr
    assert f"vramscope: leak: +32.0 KiB/step at {leak_site()} (cpu live tensors, growing since step" in out, out
    kept = r"\.grad_fn(\.next_functions\[\d\]\[\d\])+\.kept  → Tensor 32\.0 KiB f32 \[32, 256\] cpu"
    assert re.search(r"vramscope:   held by __main__\.loss(es\[\d+\])?" + kept, out), "found live: " + out
    assert re.search(r"Who holds it\n  " + re.escape(leak_site()) + r"  \(\+32\.0 KiB/step\)\n    __main__\.losses\[\d+\]"
                     + kept, out), "in the analysis at the end: " + out
    assert "LEAK  +32.0 KiB per optimizer step since step" in out, out
    assert "\n  cpu  step 0 -> 29: " in out and "\n  cpu  " in out.split("\nPeak")[1], "the ledger and the peak say cpu"
    assert "cuda" not in out.lower().replace("no cuda here", ""), out
    assert (user.folder / "vramscope.vscope").exists() and (user.folder / "vramscope.html").exists()


def check_the_fix_does_not_leak(user: User) -> None:
    proc = user.run("vramscope", "run", "--fail-on-leak", "--", "python", "train_fixed.py")
    assert said_first(proc.stderr).startswith(LIVE_TENSORS) and "\nNO LEAK  " in proc.stdout, proc.stdout + proc.stderr


def check_the_pytest_markers_catch_the_leak(user: User) -> None:
    out = user.run("python", "-m", "pytest", "-p", "no:cacheprovider", "test_training.py").stdout
    assert "1 passed, 1 xfailed" in out, out
    assert (f"FAIL test_training.py::test_keeping_each_loss_leaks: leak: +32.0 KiB/step at {leak_site()}, over "
            "the limit of 4.0 KiB/step (judged from live tensors, no CUDA here)") in out, out
    assert re.search(r"ok   test_training.py::test_keeping_loss_values_does_not_leak: no leak; peak [\d.]+ KiB "
                     r"\(judged from live tensors, no CUDA here\)", out), out
    whole = user.run("python", "-m", "pytest", "-p", "no:cacheprovider", "--runxfail", "test_training.py", rc=1).stdout
    assert "1 failed, 1 passed" in whole and "held by test_keeping_each_loss_leaks() local 'losses'[" in whole, whole


def check_the_trainer_callback_stops_the_leaking_run(user: User) -> None:
    out = user.run("python", "train_hf.py").stderr
    assert said_first(out).startswith(LIVE_TENSORS), out
    assert re.search(r"vramscope: leak: \+32\.0 KiB/step at train_hf\.py:\d+ MyTrainer\.compute_loss \(cpu live tensors", out), out
    assert "vramscope:   held by __main__.MyTrainer.logits_for_metrics[" in out, out
    stopped = re.search(r"vramscope: stopping the run at step (\d+): OOM projected at step", out)
    assert stopped, out
    assert (user.folder / "out" / f"checkpoint-{stopped[1]}").is_dir(), "the Trainer saved a checkpoint first"
    assert (user.folder / "out" / "vramscope" / "vramscope.html").exists()


def check_compare_finds_the_root_cause_fix(user: User) -> None:
    out = user.run("vramscope", "compare", "compare.toml", "-o", "compared").stdout
    table = out[out.index("\n  row "):out.index("\n  root cause")].splitlines()[2:]
    rows = {line.split()[0]: line.split() for line in table if not line.strip().startswith("`-")}
    assert rows["baseline"][1:3] == ["LEAK", "+32.0"] and rows["keep_numbers"][1:3] == ["no", "leak"], out
    assert "root-cause fix" in " ".join(rows["keep_numbers"]), out
    assert rows["baseline"][6] == rows["keep_numbers"][6] == "-", "live tensors on the CPU: no reserved memory to show"
    assert f"{leak_site()}  +32.0 KiB/step from step 0" in out and "held by __main__.loss" in out, out
    assert "gone with: keep_numbers" in out and (user.folder / "compared" / "compare.md").exists(), out


CHECKS = [check_the_leak_is_found_with_its_owner, check_the_fix_does_not_leak, check_the_pytest_markers_catch_the_leak,
          check_the_trainer_callback_stops_the_leaking_run, check_compare_finds_the_root_cause_fix]
