"""Side-by-side timing of reading a torch memory snapshot: Python's pickle.load against
`vramscope analyze` (import + full analysis), each in fresh processes, interleaved, median of N.
Like the pickle.load figure (timed around the call, interpreter start-up excluded), vramscope's
import + analysis is timed inside its process; the whole process's wall time is shown too.

    python bench/compare_import.py SNAPSHOT.pickle.gz [--runs 5] [--core build/dev/vramscope-core]

Prints a Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import pickle
import shutil
import statistics
import subprocess
import sys
import time

PICKLE_LOAD = "import gzip,pickle,sys,time; t=time.perf_counter(); s=pickle.load(gzip.open(sys.argv[1])); print(time.perf_counter()-t)"


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("snapshot")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--core", default="build/dev/vramscope-core")
    a = ap.parse_args()

    with gzip.open(a.snapshot) as f:
        events = sum(len(t) for t in pickle.load(f)["device_traces"])
    cli = shutil.which("vramscope")
    rows: dict[str, list[float]] = {
        "pickle.load(gzip.open(f)) alone": [],
        "vramscope import + analysis, timed inside the process": [],
        "vramscope-core analyze f (whole process)": [],
    }
    if cli:
        rows["vramscope analyze f (Python entry point)"] = []
    for _ in range(a.runs):  # interleaved, so drift hits every variant alike
        out = subprocess.run([sys.executable, "-c", PICKLE_LOAD, a.snapshot], check=True, capture_output=True, text=True)
        rows["pickle.load(gzip.open(f)) alone"].append(float(out.stdout))
        t = time.perf_counter()
        out = subprocess.run([a.core, "analyze", a.snapshot, "--json", "-"], check=True, capture_output=True, text=True)
        rows["vramscope-core analyze f (whole process)"].append(time.perf_counter() - t)
        findings = json.loads(out.stdout)
        rows["vramscope import + analysis, timed inside the process"].append(
            findings["import_seconds"] + findings["analysis_seconds"])
        if cli:
            rows["vramscope analyze f (Python entry point)"].append(timed([cli, "analyze", a.snapshot]))
    base = statistics.median(rows["pickle.load(gzip.open(f)) alone"])
    print(f"{events:,} events, {a.runs} runs each, interleaved; median (min-max)\n")
    print("| what | seconds | M events/s | vs pickle.load |")
    print("|---|---|---|---|")
    for name, xs in rows.items():
        m = statistics.median(xs)
        print(f"| {name} | {m:.3f} ({min(xs):.3f}-{max(xs):.3f}) | {events / m / 1e6:.2f} | {base / m:.1f}x |")


if __name__ == "__main__":
    main()
