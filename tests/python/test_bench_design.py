"""The benchmarks' designs, which need no GPU to check: the alternating benchmark's orders of
variants (bench/capture_overhead.py), whose balance its figures rest on."""

import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import capture_overhead  # noqa: E402


def test_the_orders_put_every_variant_in_every_place_and_after_every_other_equally_often():
    # A rotation fails this: it keeps each variant's predecessor, so one variant's step pays for
    # what another left behind (torch's recorder, its caches) in most cycles.
    for variants in (capture_overhead.IN_PROCESS, ["none", "null", "no-stacks", "vramscope"], ["a", "b", "c"]):
        orders = capture_overhead.balanced_orders(variants)
        assert all(sorted(order) == sorted(variants) for order in orders)
        follows = Counter((a, b) for order in orders for a, b in zip(order, order[1:]))
        assert set(follows) == {(a, b) for a in variants for b in variants if a != b}
        assert len(set(follows.values())) == 1, follows
        places = Counter((v, i) for order in orders for i, v in enumerate(order))
        assert len(places) == len(variants) ** 2 and len(set(places.values())) == 1, places


# docs/benchmarks.md: today's figures, one table, each row's command one of bench/'s entry points.
ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "benchmarks.md"
SCRIPT = re.compile(r"\b((?:bench|tests/data)/[\w./-]+\.(?:py|sh|cpp))\b|build/bench/([\w-]+)")


def figure_rows() -> list[list[str]]:
    rows = [line.strip("|").split(" | ") for line in DOC.read_text().splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in row] for row in rows]


def test_the_benchmarks_are_one_current_table_of_named_figures_after_a_page_of_method():
    text = DOC.read_text()
    head, table = text.split("## Figures", 1)
    assert len(head.splitlines()) <= 60, "the method is at most a page"
    assert "| figure | value | command | machine | commit |" in table
    rows = figure_rows()
    assert len(rows) >= 15
    names = [row[0] for row in rows]
    assert len(set(names)) == len(names), "a figure has one row"
    for row in rows:
        assert len(row) == 5 and all(row), row
        assert re.fullmatch(r"`[a-z0-9-]+`", row[0]), row[0]
        assert re.fullmatch(r"[0-9a-f]{7}.*|\d{4}-\d\d-\d\d", row[4]), f"{row[0]}: commit {row[4]!r}"
    assert (ROOT / "docs" / "benchmarks-history.md").is_file()


def test_each_figure_names_its_entry_point_and_each_entry_point_exists():
    targets = set(re.findall(r"add_executable\((\w+) EXCLUDE_FROM_ALL bench/", (ROOT / "CMakeLists.txt").read_text()))
    for name, _, command, _, _ in figure_rows():
        found = SCRIPT.findall(command)
        assert found, f"{name}: its command names no entry point in bench/"
        for script, binary in found:
            if script:
                assert (ROOT / script).is_file(), f"{name}: {script}"
            else:
                assert binary in targets | {"vramscope-core"}, f"{name}: build/bench/{binary} is not built"
    # Every bench target is used by a figure or the method.
    text = DOC.read_text()
    for target in targets:
        assert target in text, f"the bench target {target} serves no figure"


def test_every_file_in_bench_serves_a_figure():
    text = DOC.read_text()
    files = [p for p in (ROOT / "bench").iterdir() if p.is_file()]  # not bench/out, where the figures' runs write
    # A C++ file serves as the target it builds (its stem).
    served = {p.name for p in files if p.name in text or (p.suffix == ".cpp" and p.stem in text)}
    # What a served script runs or imports is served too.
    for _ in range(3):
        for name in list(served):
            body = (ROOT / "bench" / name).read_text()
            served |= {p.name for p in files
                       if p.name in body or (p.suffix == ".py" and re.search(rf"\b(from|import) {p.stem}\b", body))}
    unserved = sorted(p.name for p in files if p.name not in served)
    assert not unserved, f"bench/ files no figure uses (a finished experiment?): {unserved}"


def test_comments_cite_figures_by_name_not_by_the_log():
    figures = {row[0].strip("`") for row in figure_rows()}
    log_citation = re.compile(r"benchmarks\.md[,:]? ?(?:§|stop)|\b[Ss]tops? \d+\b")
    for folder in ("src", "python", "bench", "docs", "tests/cpp", "tests/python"):
        for path in (ROOT / folder).rglob("*"):
            if not path.is_file() or path.suffix not in {".h", ".cpp", ".py", ".sh", ".md"}:
                continue
            if path.name == "benchmarks-history.md" or path == Path(__file__).resolve():
                continue
            text = path.read_text()
            assert not log_citation.search(text), f"{path.relative_to(ROOT)} cites the log: {log_citation.search(text)[0]!r}"
            for name in re.findall(r"benchmarks\.md's ([a-z0-9-]+)", text.replace("\n// ", " ")):
                assert name in figures, f"{path.relative_to(ROOT)} cites a figure benchmarks.md does not have: {name}"
