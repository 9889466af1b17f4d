"""Extra memory of a live capture over a long run (the bound: <= 64 MiB after 10,000 steps).

A loop of `--allocs` small allocations a step from ~50 call sites, a fifth of them kept for one
more step, like activations saved for backward. The figure is the growth of the process's RSS
from step 100 to the last step, with capture, less the same without capture (a fresh process
each, interleaved).

  python bench/capture_memory.py --steps 10000 --allocs 1600
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def site(i, kept):
    import torch

    t = torch.empty(256 + 64 * (i % 7), device="cuda")
    if i % 5 == 0:
        kept.append(t)


def worker(variant: str, steps: int, allocs: int) -> dict:
    import torch

    torch.cuda.init()
    capture = None
    if variant == "vramscope":
        import vramscope

        capture = vramscope.track(os.path.join(tempfile.mkdtemp(), "mem.vscope"), summary=False).start()
    sites = [eval(f"lambda i, kept: site(i, kept)  # site {k}", {"site": site}) for k in range(50)]
    kept, previous = [], []
    t0 = time.perf_counter()
    for step in range(steps):
        previous, kept = kept, []
        for i in range(allocs):
            sites[i % 50](i, kept)
        if capture is not None:
            import vramscope

            vramscope.step()
        if step == 100:
            rss_at_100 = rss_bytes()
    torch.cuda.synchronize()
    result = {"variant": variant, "rss_growth": rss_bytes() - rss_at_100, "seconds": time.perf_counter() - t0}
    if capture is not None:
        capture.stop()
        result["trace_bytes"] = os.path.getsize(capture.path)
        result["allocations"] = capture.allocations
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--allocs", type=int, default=1600)
    ap.add_argument("--worker")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.steps, args.allocs)))
        return 0
    results = {}
    for variant in ["none", "vramscope"]:
        proc = subprocess.run([sys.executable, __file__, "--worker", variant, "--steps", str(args.steps), "--allocs",
                               str(args.allocs)], capture_output=True, text=True)
        if proc.returncode:
            print(proc.stdout, proc.stderr)
            return 1
        results[variant] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(results[variant], flush=True)
    extra = results["vramscope"]["rss_growth"] - results["none"]["rss_growth"]
    print(f"{args.steps} steps x {args.allocs} allocations: extra RSS growth with capture "
          f"{extra / 2**20:.1f} MiB; trace {results['vramscope']['trace_bytes'] / 2**20:.1f} MiB for "
          f"{results['vramscope']['allocations']:,} allocations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
