"""Two vramscope-core binaries, the same answers: `analyze --json -` (stdout, stderr and exit
status) and `convert` (the .vscope bytes, so every event) on every pickle given, byte for byte.
For a change to the importer that must not change what it reads.

  python3 bench/same_findings.py OLD_BINARY NEW_BINARY [EXTRA_FILES...]

Inputs: every tests/data/**/*.pickle* (the fixtures and the hostile corpus), the extra files
given (the big snapshots), and each fixture re-pickled at protocols 2 to 5, plain and gzip'd.
Prints one line per difference and the count of comparisons; exits 1 on any difference.
"""

from __future__ import annotations

import gzip
import pathlib
import pickle
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


TIMINGS = re.compile(rb'"(import|analysis)_seconds":[-+.e0-9]+')


def outcome(binary: str, args: list[str]) -> tuple[int, bytes, bytes]:
    """Exit status, stdout (its timings blanked: they differ run to run) and stderr."""
    p = subprocess.run([binary, *args], capture_output=True, timeout=600)
    return p.returncode, TIMINGS.sub(rb'"\1_seconds":0', p.stdout), p.stderr


def converted(binary: str, path: pathlib.Path, out: pathlib.Path) -> tuple[int, bytes, bytes]:
    out.unlink(missing_ok=True)
    status, _, err = outcome(binary, ["convert", str(path), str(out)])
    # The error names the output path: the same for both binaries, so it compares as is.
    return status, out.read_bytes() if out.exists() else b"", err


def reprotocoled(fixtures: list[pathlib.Path], into: pathlib.Path) -> list[pathlib.Path]:
    made = []
    for f in fixtures:
        opener = gzip.open if f.suffix == ".gz" else open
        with opener(f, "rb") as src:
            data = pickle.load(src)
        stem = f.name.split(".")[0]
        for protocol in (2, 3, 4, 5):
            plain = into / f"{stem}.p{protocol}.pickle"
            plain.write_bytes(pickle.dumps(data, protocol=protocol))
            gz = into / f"{stem}.p{protocol}.pickle.gz"
            gz.write_bytes(gzip.compress(plain.read_bytes(), 6))
            made += [plain, gz]
    return made


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    old, new, extra = sys.argv[1], sys.argv[2], [pathlib.Path(p) for p in sys.argv[3:]]
    data = ROOT / "tests" / "data"
    inputs = sorted(data.rglob("*.pickle*"))
    fixtures = sorted(data.glob("*.pickle.gz"))  # the real ones: re-pickled, they must still parse
    comparisons = differences = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = pathlib.Path(tmp)
        (tmpdir / "p").mkdir()
        inputs += reprotocoled(fixtures, tmpdir / "p") + extra
        for path in inputs:
            checks = {
                "analyze --json": (outcome(old, ["analyze", str(path), "--json", "-"]),
                                   outcome(new, ["analyze", str(path), "--json", "-"])),
                "convert": (converted(old, path, tmpdir / "out.vscope"), converted(new, path, tmpdir / "out.vscope")),
            }
            for what, (a, b) in checks.items():
                comparisons += 1
                if a != b:
                    differences += 1
                    print(f"DIFFERENT {what} {path}: exit {a[0]} vs {b[0]}, {len(a[1])} vs {len(b[1])} bytes out,"
                          f" stderr {a[2][:200]!r} vs {b[2][:200]!r}")
    print(f"{comparisons} comparisons over {len(inputs)} inputs, {differences} different")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
