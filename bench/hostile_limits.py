"""Peak RSS and wall time of the hostile inputs that amplify (issue 41), at the default limits, for
one or more `vramscope-core` binaries side by side (an older tree's first, say):

    python3 bench/hostile_limits.py OLD/vramscope-core build/bench/vramscope-core

Each input is analysed (findings JSON written) and exported to Perfetto; a row says the exit
code, the peak RSS and the seconds of each binary. Bound: 1.5 GB and 30 s each."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOSTILE = Path(__file__).resolve().parent.parent / "tests" / "data" / "hostile"
INPUTS = ["devices_times_steps.pickle.gz", "devices_times_steps.vscope", "strings_front_coded.vscope",
          "perfetto_devices_times_steps.vscope"]


def measure(binary: str, args: list[str]) -> tuple[int, int, float]:
    """(exit code, peak RSS in bytes, seconds) of one run."""
    started = time.monotonic()
    proc = subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    return os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024, time.monotonic() - started


def main() -> None:
    binaries = sys.argv[1:]
    if not binaries:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as out:
        print("| input | command | " + " | ".join(binaries) + " |")
        print("|---|---|" + "---|" * len(binaries))
        for name in INPUTS:
            path = str(HOSTILE / name)
            for command, args in (("analyze --json", ["analyze", path, "--json", f"{out}/f.json"]),
                                  ("export --perfetto", ["export", path, "--perfetto", f"{out}/p.json"])):
                cells = []
                for binary in binaries:
                    rc, rss, seconds = measure(binary, args)
                    cells.append(f"rc {rc}, {rss / 1e9:.2f} GB, {seconds:.2f} s")
                print(f"| {name} | {command} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
