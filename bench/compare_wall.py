"""Wall time of a 6-cell `vramscope compare` matrix on one GPU against the same six runs launched
by hand (a copy of the project, `git apply`, `vramscope run --max-steps`, one after another), side
by side in one process, alternating which goes first. The toy is tests/data/compare_two_leaks.

    python bench/compare_wall.py --repeat 1 --out bench/out/compare_wall.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOY = Path(__file__).resolve().parent.parent / "tests" / "data" / "compare_two_leaks"
MODES = {"b256": ["--batch", "256"], "b512": ["--batch", "512"], "b768": ["--batch", "768"]}
STEPS = 30


def by_compare(work: Path) -> float:
    flags = [a for name, args in MODES.items() for a in ("--mode", f"{name}={' '.join(args)}")]
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "vramscope", "compare", "--steps", str(STEPS), *flags, "--variant",
                    "fix_a=patch:fix_a.patch", "-o", str(work / "compare"), "--", "python", "train.py"],
                   cwd=work / "toy", check=True, capture_output=True)
    return time.perf_counter() - t0


def by_hand(work: Path) -> float:
    t0 = time.perf_counter()
    for name, args in MODES.items():
        for variant in ("baseline", "fix_a"):
            tree = work / "toy"
            if variant == "fix_a":  # what people do: a copy, the patch, the run from there
                tree = work / f"hand-{name}-{variant}"
                shutil.copytree(work / "toy", tree)
                subprocess.run(["git", "apply", "fix_a.patch"], cwd=tree, check=True)
            subprocess.run([sys.executable, "-m", "vramscope", "run", "--max-steps", str(STEPS), "-o",
                            str(work / f"hand-{name}-{variant}.vscope"), "--", "python", "train.py", *args],
                           cwd=tree, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", default="bench/out/compare_wall.json")
    args = parser.parse_args()
    rounds = []
    for i in range(args.repeat):
        for first in ((by_hand, by_compare) if i % 2 == 0 else (by_compare, by_hand)):
            with tempfile.TemporaryDirectory() as d:
                work = Path(d)
                shutil.copytree(TOY, work / "toy")
                rounds.append({"how": first.__name__, "seconds": round(first(work), 2)})
    hand = [r["seconds"] for r in rounds if r["how"] == "by_hand"]
    tool = [r["seconds"] for r in rounds if r["how"] == "by_compare"]
    result = {"cells": 2 * len(MODES), "steps": STEPS, "rounds": rounds,
              "compare_over_hand": round(sum(tool) / sum(hand), 3)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
