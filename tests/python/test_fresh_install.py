"""A new user's first hour on a CPU: a fresh virtual environment through the README's first command,
`pip install . && vramscope demo`, from a copy of this checkout (its tracked and untracked files, as a
clone with these changes would have them), then every example as its docstring says
(example_runs.py). The environment takes its other packages (torch, transformers, the build tools)
from this interpreter's, so nothing is downloaded; the C++ build is most of its few minutes."""

import os
import shutil
import subprocess
import sys

import pytest

from example_runs import CHECKS, ROOT, User


def copy_of_the_checkout(to):
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():  # a file deleted in the worktree is still listed
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, to / name)
    return to


def test_a_fresh_virtual_environment_runs_the_readme_and_every_example(tmp_path):
    for needed in ("torch", "transformers", "accelerate", "scikit_build_core", "nanobind"):
        pytest.importorskip(needed)
    source = copy_of_the_checkout(tmp_path / "vramscope")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", "VIRTUAL_ENV": str(venv)}
    env.pop("VRAMSCOPE_RUN", None)
    # The README's first command; --no-build-isolation keeps the build offline.
    first = subprocess.run("pip install --no-build-isolation . && vramscope demo", shell=True, cwd=source, env=env,
                           capture_output=True, text=True, timeout=420)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert "\nLEAK  +5.0 MiB per optimizer step since step 0" in first.stdout, first.stdout
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import vramscope; print(vramscope.__file__)"],
                           capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert where.startswith(str(venv)), f"vramscope resolves outside the new environment: {where}"
    user = User.with_examples(venv / "bin", tmp_path)
    for check in CHECKS:
        check(user)
