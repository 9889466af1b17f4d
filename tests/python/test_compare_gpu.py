"""vramscope compare on a GPU: the seeds' matrix in small (tests/data/compare_two_leaks): two
independent leaks, a candidate fix for each (a patch, a preloaded monkeypatch) and a harmless
variant, in two modes, one command."""

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

TOY = Path(__file__).resolve().parent.parent / "data" / "compare_two_leaks"


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


def test_each_fix_is_partial_both_together_the_fix_and_the_harmless_variant_no_effect(tmp_path):
    project = tmp_path / "toy"
    shutil.copytree(TOY, project)
    before = digest(project)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "vramscope", "compare", "matrix.toml", "-o", str(out), "--json",
                           str(out / "table.json")], cwd=project, capture_output=True, text=True, timeout=900)
    print(proc.stdout, proc.stderr[-3000:])
    assert proc.returncode == 0, proc.stderr
    assert digest(project) == before  # the patch went to a copy
    modes = json.loads((out / "table.json").read_text())["modes"]
    assert [m["mode"] for m in modes] == ["b256", "b512"]
    for mode in modes:
        cells = {c["row"]: c for c in mode["cells"]}
        assert {row: c["status"] for row, c in cells.items()} == {
            "baseline": "baseline", "fix_a": "partial", "fix_b": "partial", "harmless": "no effect",
            "all": "root-cause fix"}, cells
        assert cells["baseline"]["leak_bytes_per_step"] == pytest.approx(2 << 20, rel=0.10)
        for row in ("fix_a", "fix_b"):
            assert cells[row]["leak_bytes_per_step"] == pytest.approx(1 << 20, rel=0.10)
            assert cells[row]["outcome"] == "finished"
        chain = {link["site"].split(" ")[0]: link for link in mode["root_cause"]}
        assert set(chain) == {"train.py:31", "toy_prefetch.py:9"}, mode["root_cause"]
        assert chain["train.py:31"]["gone_with"] == ["fix_a", "all"]
        assert chain["toy_prefetch.py:9"]["gone_with"] == ["fix_b", "all"]
        assert chain["toy_prefetch.py:9"]["owner"].startswith("toy_prefetch._pool[")
    for cell in (out / "cells").glob("*/*/findings.json"):
        steps = json.loads(cell.read_text())["steps"]["count"]
        assert 28 <= steps <= 30, (cell, steps)  # stopped at the step limit, not the script's 1,000
