"""The build holds the one-way flow: in a scratch copy of the tree, a stage that includes a stage it
must not read fails to compile (CMakeLists.txt's stage roots), and the same file compiles without
that include."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("ninja")),
                                reason="needs cmake and ninja")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """The tree's build inputs copied, configured with the tests (so capture's sources compile)."""
    tree = tmp_path_factory.mktemp("tree")
    shutil.copy(ROOT / "CMakeLists.txt", tree)
    for folder in ("src", "bench", "tests/cpp"):
        shutil.copytree(ROOT / folder, tree / folder)
    build = tree / "build"
    configured = subprocess.run(["cmake", "-S", str(tree), "-B", str(build), "-G", "Ninja", "-DVRAMSCOPE_TESTS=ON",
                                 "-DCMAKE_BUILD_TYPE=Debug"], capture_output=True, text=True)
    if configured.returncode != 0 and "GTest" in configured.stderr:
        pytest.skip("GoogleTest is not installed (apt-get install libgtest-dev)")
    assert configured.returncode == 0, configured.stderr
    return tree, build


def compile_object(build: Path, target: str, source: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ninja", "-C", str(build), f"CMakeFiles/{target}.dir/{source}.o"], capture_output=True,
                          text=True)


@pytest.mark.parametrize("target, source, bad_include", [
    ("vramscope_tests", "src/vramscope/capture/calling_library.cpp", "analysis/judge.h"),  # capture reads no analysis
    ("vramscope_trace", "src/vramscope/trace/writer.cpp", "analysis/judge.h"),  # an upward include
    ("vramscope_analysis", "src/vramscope/analysis/fit.cpp", "render/terminal.h"),
    ("vramscope_findings", "src/vramscope/findings/vocabulary.cpp", "events/event.h"),  # findings read common only
])
def test_an_include_of_a_stage_not_read_fails_the_build(scratch, target, source, bad_include):
    tree, build = scratch
    good = compile_object(build, target, source)
    assert good.returncode == 0, good.stdout
    path = tree / source
    original = path.read_text()
    path.write_text(f'#include "{bad_include}"\n' + original)
    try:
        bad = compile_object(build, target, source)
    finally:
        path.write_text(original)
    assert bad.returncode != 0
    assert f"{bad_include}: No such file or directory" in bad.stdout
