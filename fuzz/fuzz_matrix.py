"""Fuzzes the compare matrix parser (python/vramscope/compare/matrix.py) as `vramscope compare` runs
it: a matrix file's bytes and the flags beside it (--variant, --mode, --steps, --timeout,
--device-memory) through `compare.parse`. Only a MatrixError may come out, and a matrix it accepts
must keep the promises of issue 21: names that make cell folders inside OUT/cells, a finite time
limit in range, steps and device memory in range, no NUL in a command, argument or environment.

    python fuzz/fuzz_matrix.py CORPUS_DIR -max_total_time=1800     (atheris: coverage-guided)
    python fuzz/fuzz_matrix.py --mutate SECONDS CORPUS_DIR...       (no atheris: seeded mutations)

The seeds: tests/data/compare_two_leaks/matrix.toml and the hostile matrices (tests/data/hostile).
An input is one selector byte (how many flags follow), the flags as NUL-separated words, then
the matrix file's bytes."""

from __future__ import annotations

import contextlib
import io
import math
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ["CUDA_VISIBLE_DEVICES"] = "0"  # compare.parse asks for the GPUs: never run nvidia-smi

try:
    import atheris
except ImportError:
    atheris = None

if atheris:
    with atheris.instrument_imports(include=["vramscope.compare"]):
        from vramscope.compare import parse
        from vramscope.compare.matrix import MAX_STEPS, MAX_TIMEOUT, NAME, MatrixError
else:
    from vramscope.compare import parse
    from vramscope.compare.matrix import MAX_STEPS, MAX_TIMEOUT, NAME, MatrixError

FLAGS = ["--variant", "--mode", "--steps", "--timeout", "--device-memory", "--jobs", "--launcher", "--"]
# A project with a patch, a preload module and a tree, so that paths in the matrix can resolve.
PROJECT = Path(tempfile.mkdtemp(prefix="fuzz-matrix-"))
for name, text in (("fix.patch", "--- a\n+++ b\n"), ("pre.py", "x = 1\n"), ("tree/src/pkg/__init__.py", "")):
    (PROJECT / name).parent.mkdir(parents=True, exist_ok=True)
    (PROJECT / name).write_text(text)
MATRIX = PROJECT / "matrix.toml"


def split_input(data: bytes) -> tuple[list[str], bytes]:
    """(command-line words, matrix file bytes): the first byte's low 3 bits say how many
    NUL-terminated words follow (argv strings cannot hold NUL, so none of them does)."""
    if not data:
        return [], b""
    count, rest, words = data[0] & 7, data[1:], []
    for _ in range(count):
        word, sep, rest = rest.partition(b"\0")
        words.append(word.decode("utf-8", "surrogateescape"))
        if not sep:
            break
    return words, rest


def check_accepted(matrix, out: Path) -> None:
    """What every accepted matrix promises (the runner trusts these without checking again)."""
    assert matrix.command and all(isinstance(w, str) and "\0" not in w for w in matrix.command), matrix.command
    assert isinstance(matrix.steps, int) and not isinstance(matrix.steps, bool) and 0 <= matrix.steps <= MAX_STEPS
    assert isinstance(matrix.timeout, float) and math.isfinite(matrix.timeout) and 0 < matrix.timeout <= MAX_TIMEOUT
    assert isinstance(matrix.device_memory, int) and 0 <= matrix.device_memory < 1 << 64
    cells = out / "cells"
    for cell in matrix.cells():
        for name in (cell.mode.name, cell.variant.name):
            assert NAME.fullmatch(name), name
        folder = (cells / cell.mode.name / cell.variant.name).resolve()
        assert folder.parent.parent == cells.resolve(), folder
        for key, value in (*cell.mode.env, *cell.variant.env):
            assert key and "=" not in key and "\0" not in key + value, key
        assert all("\0" not in a for a in (*cell.mode.args, *cell.variant.args))
        cell.fingerprint(matrix)
        cell.variant.describe()
    matrix.why_no_all()


def one_input(data: bytes) -> None:
    words, text = split_input(data)
    MATRIX.write_bytes(text)
    args = [str(MATRIX), *words] if words[:1] != ["-"] else words[1:]  # "-": flags alone
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # -h prints the usage
            matrix, options, _ = parse(args)
    except MatrixError:
        return
    except SystemExit:  # -h
        return
    check_accepted(matrix, options.out)


def seeds() -> list[bytes]:
    root = Path(__file__).resolve().parent.parent / "tests" / "data"
    files = [root / "compare_two_leaks" / "matrix.toml", *sorted((root / "hostile").glob("matrix_*.toml"))]
    flags = b"--variant\0p=env:A=1\0--mode\0m=--x 1\0--timeout\0 90s\0"
    return [bytes([0]) + f.read_bytes() for f in files] + [bytes([8 + 6]) + flags + files[0].read_bytes()]


def mutate(data: bytes, rng: random.Random, pool: list[bytes]) -> bytes:
    """One of: flip, insert, delete, repeat a slice, splice with another input, insert a token."""
    tokens = [b"..", b"/", b"\\", b"\0", b"nan", b"inf", b"1e999", b"-1", b"\xc2\xb2", b"[variants.", b"[modes.",
              b'"', b"'", b"=", b"\n", b"[[", b"{", b"~", b"tree = \"tree\"", b"patch = \"fix.patch\"", b"ref = \"-x\"",
              b"99999999999999999999999 TB", b"true", b"env = { A = 1 }", b"\\u0000", b"\x1b[2J",
              *(flag.encode() + b"\0" for flag in FLAGS)]
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randint(0, len(data))
        op = rng.randrange(6)
        if op == 0 and data:
            data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 2:
            del data[at:at + rng.randint(1, 16)]
        elif op == 3:
            data[at:at] = data[at:at + rng.randint(1, 32)] * rng.randint(2, 8)
        elif op == 4:
            other = rng.choice(pool)
            cut = rng.randint(0, len(other))
            data = data[:at] + other[cut:]
        else:
            data[at:at] = rng.choice(tokens)
    return bytes(data[:1 << 16])


def mutation_run(seconds: float, corpus: Path) -> None:
    """Without atheris: seeded random mutations of the corpus for `seconds`; an input that fails
    is written to corpus/crash-N and re-raised."""
    corpus.mkdir(parents=True, exist_ok=True)
    pool = seeds() + [f.read_bytes() for f in sorted(corpus.iterdir()) if f.is_file()]
    rng, runs, started = random.Random(21), 0, time.monotonic()
    while time.monotonic() - started < seconds:
        data = mutate(rng.choice(pool), rng, pool)
        try:
            one_input(data)
        except Exception:
            (corpus / f"crash-{runs}").write_bytes(data)
            raise
        runs += 1
        if runs % 64 == 0 and len(pool) < 4096:
            pool.append(data)
    print(f"{runs} runs in {time.monotonic() - started:.0f} s, no failure")


def main() -> None:
    if sys.argv[1:2] == ["--mutate"]:
        mutation_run(float(sys.argv[2]), Path(sys.argv[3]))
        return
    corpus = next((Path(a) for a in sys.argv[1:] if not a.startswith("-")), None)
    if corpus is not None and not any(corpus.glob("*")):
        corpus.mkdir(parents=True, exist_ok=True)
        for k, seed in enumerate(seeds()):
            (corpus / f"seed-{k}").write_bytes(seed)
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
