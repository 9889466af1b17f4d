"""The compare matrices the README and tests/data show are read as written: a key the loader does
not know (once `steps`, which is `max_steps`) fails here, not in a new user's first run."""

import re
from pathlib import Path

import pytest

from vramscope.compare import matrix

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLE = ROOT / "tests" / "data" / "compare_two_leaks"


def readme_matrices() -> list[str]:
    return re.findall(r"```toml\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def test_the_bundled_compare_example_is_read_as_its_comment_says():
    m = matrix.from_dict(matrix.read(EXAMPLE / "matrix.toml"), EXAMPLE)
    assert m.max_steps == 30
    assert sorted(v.name for v in m.variants) == ["fix_a", "fix_b", "harmless"]


@pytest.mark.parametrize("text", readme_matrices())
def test_every_matrix_in_the_readme_is_read_as_written(tmp_path, text):
    # Its files are the bundled example's: the README shows that matrix in small.
    for name in ("fix_a.patch", "fix_b_monkeypatch.py"):
        (tmp_path / name).write_bytes((EXAMPLE / name).read_bytes())
    (tmp_path / "matrix.toml").write_text(text)
    m = matrix.from_dict(matrix.read(tmp_path / "matrix.toml"), tmp_path)
    assert m.max_steps == 30


def test_the_readme_has_a_matrix_to_check():
    assert readme_matrices()
