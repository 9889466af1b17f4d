"""Mode and row names become folders, OUT/cells/MODE/ROW, which the runner removes before a cell
runs: no name the matrix accepts may make a folder anywhere else. A seeded generator tries names
built from the characters that spell or leave paths, and the runner's own check holds when a
link on the way leads elsewhere."""

import os
import random
import string
from pathlib import Path

import pytest

from vramscope.compare.matrix import NAME, MatrixError, check_name, from_dict
from vramscope.compare.runner import ERROR, CellPathError, Options, Runner, cell_dir

# Characters that matter to paths and terminals, and ordinary ones.
PIECES = [".", "..", "/", "\\", "\0", "-", "~", "$", " ", "\n", "\x1b", "\x7f", "\u0663", "\u00b2", "\u2024", "\uff0e",
          "\u2215", "%2e", "%2f", "*", ":", *string.ascii_letters[:6], *string.digits[:4], "_", "+"]
SPECIAL = ["", ".", "..", "...", "./x", "../x", "x/..", "/", "//", "x/", "\\", "..\\x", "-rf", "--help", "x\0y", "a" * 64,
           "a" * 65, "baseline", "Baseline", "ALL", "cells", "default", "x\n", ".hidden", "a.", "a..b"]


PLAIN = "aZ09.-_+"  # what the rule allows, dots and dashes as often as letters


def names(seed: int, count: int):
    """The special names, then `count` random ones: half from every piece, half from the allowed
    characters alone (dots and dashes in every place)."""
    rng = random.Random(seed)
    yield from SPECIAL
    for i in range(count):
        pieces = PIECES if i % 2 else PLAIN
        yield "".join(rng.choice(pieces) for _ in range(rng.choice([1, 2, 3, 5, 8, 30, 64, 70])))


def test_every_name_the_rule_accepts_is_one_plain_path_component():
    accepted = 0
    for name in names(seed=21, count=20_000):
        try:
            check_name(name, "variants")
        except MatrixError:
            continue
        accepted += 1
        assert NAME.fullmatch(name) and 1 <= len(name) <= 64
        assert name.strip(".") and not name.startswith("-") and name.isascii() and name.isprintable()
        assert not {"/", "\\", "\0"} & set(name)
        assert os.path.basename(name) == name and os.path.normpath(name) == name
    assert accepted > 100  # the generator reaches the names the rule takes, not only those it refuses


def test_no_matrix_the_parser_accepts_makes_a_cell_folder_outside_out_cells(tmp_path):
    out = tmp_path / "project" / "vramscope-compare"
    cells = out.resolve() / "cells"
    rng = random.Random(2021)
    generated = list(names(seed=7, count=3_000))
    made = 0
    for _ in range(3_000):
        mode, variant = rng.choice(generated), rng.choice(generated)
        try:
            matrix = from_dict({"command": "python train.py", "modes": {mode: {"args": "--x"}},
                                "variants": {variant: {"env": {"A": "1"}}}}, tmp_path)
        except MatrixError:
            continue
        for cell in matrix.cells():
            folder = cell_dir(out, cell)
            assert folder.parent.parent == cells and folder.relative_to(cells).parts == (cell.mode.name, cell.variant.name)
            assert Path(os.path.normpath(cells / cell.mode.name / cell.variant.name)) == folder
            made += 1
    assert made > 100


def test_a_link_on_the_way_to_a_cell_folder_is_never_followed_into_rmtree(tmp_path):
    """OUT/cells/MODE a link to the user's files: the cell is an error, and the files stay."""
    precious = tmp_path / "precious"
    (precious / "fix").mkdir(parents=True)
    (precious / "fix" / "data.txt").write_text("keep\n")
    out = tmp_path / "out"
    (out / "cells").mkdir(parents=True)
    (out / "cells" / "m").symlink_to(precious)
    matrix = from_dict({"command": "python -c pass", "modes": {"m": {"args": "-x"}},
                        "variants": {"fix": {"env": {"A": "1"}}}}, tmp_path)
    cell = next(c for c in matrix.cells() if c.variant.name == "fix")
    with pytest.raises(CellPathError):
        cell_dir(out, cell)
    result = Runner(matrix, Options(out, [None], [])).run_cell(cell, None)
    assert result["state"] == ERROR and "CellPathError" in result["reason"], result
    assert (precious / "fix" / "data.txt").read_text() == "keep\n"


def test_a_link_named_cells_is_not_out_cells(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "m" / "fix").mkdir(parents=True)
    out = tmp_path / "out"
    out.mkdir()
    (out / "cells").symlink_to(elsewhere)
    matrix = from_dict({"command": "python -c pass", "modes": {"m": {"args": "-x"}},
                        "variants": {"fix": {"env": {"A": "1"}}}}, tmp_path)
    with pytest.raises(CellPathError):
        cell_dir(out, matrix.cells()[1])
    assert (elsewhere / "m" / "fix").is_dir()
