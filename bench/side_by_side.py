"""Commands timed side by side on a busy machine: each run in a fresh process, the commands
interleaved (order rotated every round), RUNS rounds; prints the median wall time, its range, and
the median peak RSS and CPU time (less moved by other load than wall time), as a markdown table
with each command's ratio to the first (by wall time).

  python bench/side_by_side.py --runs 5 'pickle.load=python3 -c "import pickle; pickle.load(open(\\"f\\",\\"rb\\"))"' \\
      'before=/tmp/wt-base/build/bench/vramscope-core analyze f' 'after=build/bench/vramscope-core analyze f'
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def run(cmd: str) -> tuple[float, float, float]:
    """Wall seconds, peak RSS (MB) and CPU seconds (user + system) of one fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) not in (0, 1):  # 1: a leak was found
        raise SystemExit(f"failed: {cmd}\n{proc.stderr.read().decode()}")
    return seconds, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("commands", nargs="+", metavar="LABEL=COMMAND")
    a = ap.parse_args()
    labelled = [c.split("=", 1) for c in a.commands]
    results = {label: [] for label, _ in labelled}
    for r in range(a.runs):
        order = labelled[r % len(labelled):] + labelled[: r % len(labelled)]
        for label, cmd in order:
            results[label].append(run(cmd))
    base = statistics.median(r[0] for r in results[labelled[0][0]])
    print(f"{a.runs} runs each, interleaved, fresh processes; median (min-max)\n")
    print(f"| command | seconds | CPU seconds | peak RSS, MB | vs {labelled[0][0]} |")
    print("|---|---|---|---|---|")
    for label, _ in labelled:
        secs = [r[0] for r in results[label]]
        cpu = [r[2] for r in results[label]]
        rss = statistics.median(r[1] for r in results[label])
        med = statistics.median(secs)
        print(f"| {label} | {med:.3f} ({min(secs):.3f}-{max(secs):.3f}) | {statistics.median(cpu):.3f} "
              f"({min(cpu):.3f}-{max(cpu):.3f}) | {rss:.0f} | {base / med:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
