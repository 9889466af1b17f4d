import json
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent.parent / "data"
FIXTURES = sorted(DATA.glob("*.pickle.gz"))


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def vramscope(*args: str, check_rc: int | None = 0) -> subprocess.CompletedProcess:
    """Runs the installed command line as a user would."""
    proc = subprocess.run([sys.executable, "-m", "vramscope", *args], capture_output=True, text=True, timeout=120)
    if check_rc is not None:
        assert proc.returncode == check_rc, proc.stdout + proc.stderr
    return proc


def truth(fixture: Path) -> dict:
    return json.loads(fixture.with_name(fixture.name.replace(".pickle.gz", ".truth.json")).read_text())


def stderr_on_a_terminal(*args: str, env: dict | None = None) -> bytes:
    """What `vramscope ARGS` writes to stderr when stderr is a terminal (a pty), whole."""
    import os
    import pty

    terminal, child_end = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "vramscope", *args], stdout=subprocess.DEVNULL,
                            stderr=child_end, env=env)
    os.close(child_end)
    out = b""
    while True:
        try:
            chunk = os.read(terminal, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        out += chunk
    proc.wait()
    os.close(terminal)
    return out
