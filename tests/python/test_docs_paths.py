"""The map is the tree: every path ARCHITECTURE.md names exists, every source file has its line in
its folder's list, and a folder's list fits a screen. The README's layout names folders that exist."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "ARCHITECTURE.md"
SOURCE = {".h", ".cpp", ".py", ".pyi", ".pth", ".html", ".in"}  # what a folder's list must name
CHECKED = SOURCE | {".md", ".toml", ".sh"}  # a backticked name ending so is a file that must exist
SCREEN = 40  # lines a folder's section may take


def named(text: str) -> list[str]:
    """Backticked names that are files or folders (not `Trace::faults`, `render_*`, `.vscope`)."""
    out = []
    for token in re.findall(r"`([^`\s]+)`", text):
        if token.startswith(".") or any(c in token for c in "*:()<>=") or token.startswith("-"):
            continue
        if token.endswith("/") or Path(token).suffix in CHECKED:
            out.append(token)
    return out


def sections() -> list[tuple[str, list[str]]]:
    """(folder, its lines) for each `### `FOLDER/`` section."""
    out: list[tuple[str, list[str]]] = []
    for line in MAP.read_text().splitlines():
        heading = re.match(r"### `([^`]+/)`", line)
        if heading:
            out.append((heading[1], []))
        elif line.startswith("#"):
            out.append(("", []))
        elif out:
            out[-1][1].append(line)
    return [(folder, lines) for folder, lines in out if folder]


def test_every_path_the_map_names_exists():
    text = MAP.read_text()
    here = {folder: "\n".join(lines) for folder, lines in sections()}
    missing = []
    for token in named(text):
        # From the root, from src/vramscope/ (the C++ folders' own spelling), or from a section's folder.
        bases = [ROOT, ROOT / "src" / "vramscope"] + [ROOT / f for f, body in here.items() if f"`{token}`" in body]
        if not any((base / token).exists() for base in bases):
            missing.append(token)
    assert not missing, f"ARCHITECTURE.md names paths that do not exist: {missing}"
    assert len(here) >= 15


def test_every_source_file_has_its_line_in_its_folder():
    for folder, lines in sections():
        directory = ROOT / folder
        assert directory.is_dir(), folder
        listed = {m[1] for line in lines if (m := re.match(r"- `([^`]+)`", line))}
        for name in listed:
            assert (directory / name).is_file(), f"{folder}{name} is listed but is not a file there"
        for path in sorted(directory.iterdir()):
            if path.suffix not in SOURCE or path.name in listed:
                continue
            # A .cpp is the line of its header.
            assert path.suffix == ".cpp" and path.with_suffix(".h").name in listed, (
                f"{folder}{path.name} has no line in ARCHITECTURE.md's {folder} list")


def test_each_folder_fits_a_screen_and_each_file_one_line():
    for folder, lines in sections():
        body = [line for line in lines if line.strip()]
        assert len(body) <= SCREEN, f"{folder}: {len(body)} lines"
        for line in body:
            assert line.startswith("- `") or not line.startswith("-"), line
            assert len(line) <= 150, f"{folder}: a line of {len(line)} characters: {line[:60]}..."
    # No table cell is a paragraph.
    for line in MAP.read_text().splitlines():
        if line.startswith("|"):
            assert len(line) <= 150, line[:80]


def test_the_readme_layout_names_folders_that_exist_and_the_live_monitor_where_it_is():
    readme = (ROOT / "README.md").read_text()
    layout = readme.split("## Layout", 1)[1].split("```")[1]
    for line in layout.splitlines():
        for word in line.split()[:1]:
            for path in word.split(","):
                if "/" in path:
                    assert (ROOT / path.rstrip("/")).exists(), path
    monitor = [line for line in layout.splitlines() if "live" in line and "monitor" in line]
    assert monitor and all(line.startswith("src/vramscope/analysis") for line in monitor), monitor
    assert (ROOT / "src" / "vramscope" / "analysis" / "live_monitor.h").is_file()
