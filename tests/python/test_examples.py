"""The compare matrices the README and tests/data show are read as written: a key the loader does
not know (once `steps`, which is `max_steps`) fails here, not in a new user's first run. And
examples/ runs on the CPU as each file says, with what the README shows of it."""

import re
import subprocess
import sys
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


# -- examples/ --------------------------------------------------------------------------------

from example_runs import CHECKS, EXAMPLES, User  # noqa: E402


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__.removeprefix("check_"))
def test_each_example_runs_on_the_cpu_as_its_docstring_says(check, tmp_path):
    pytest.importorskip("torch")
    if check.__name__ == "check_the_trainer_callback_stops_the_leaking_run":
        pytest.importorskip("transformers")
        pytest.importorskip("accelerate")
    check(User.with_examples(Path(sys.executable).parent, tmp_path))


def code_of(script: Path) -> str:
    """A script past its docstring."""
    text = script.read_text()
    return text[text.index('"""', 3) + 3:]


def test_the_matrix_patch_makes_the_leaking_loop_its_fixed_twin(tmp_path):
    (tmp_path / "train_leak.py").write_bytes((EXAMPLES / "train_leak.py").read_bytes())
    subprocess.run(["git", "apply", str(EXAMPLES / "keep_numbers.patch")], cwd=tmp_path, check=True)
    assert code_of(tmp_path / "train_leak.py") == code_of(EXAMPLES / "train_fixed.py")
    m = matrix.from_dict(matrix.read(EXAMPLES / "compare.toml"), EXAMPLES)
    assert m.command == ["python", "train_leak.py"] and m.max_steps == 20
    assert [Path(p.file).name for v in m.variants for p in v.patches] == ["keep_numbers.patch"]


def readme_examples() -> list[tuple[str, str]]:
    """The README's Python blocks that begin `# examples/FILE`: (FILE, the rest of the block)."""
    blocks = re.findall(r"```python\n# examples/(\S+)\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert {name for name, _ in blocks} >= {"test_training.py", "train_hf.py"}, "the pytest and Trainer snippets"
    return blocks


@pytest.mark.parametrize("name, snippet", readme_examples())
def test_the_readmes_snippets_are_the_examples_own_lines(name, snippet):
    assert snippet in (EXAMPLES / name).read_text(), f"README's examples/{name} is not in the file as shown"
