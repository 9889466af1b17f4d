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
