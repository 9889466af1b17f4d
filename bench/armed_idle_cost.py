"""The cost of an armed run while it waits (`vramscope run --armed`, no attach yet) against no
capture: fresh processes taking turns, each timing its own training steps; the figure is the
median of each pair's ratio of median step times, with the pairs' range.

    python3 bench/armed_idle_cost.py [--pairs 10] [--steps 400]

Each process is started as `vramscope run --armed` starts its command (the same VRAMSCOPE_RUN),
without the launcher around it, so only what the process itself carries is timed.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from vramscope.launch import run_environment

LOOP = textwrap.dedent("""
    import json, sys, time, torch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_num_threads(1)  # on a few cores, torch's thread pool moves a CPU step by more than any cost
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]).to(device)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(64, 256, device=device)
    times = []
    for step in range(int(sys.argv[1])):
        t = time.perf_counter()
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    settled = sorted(times[len(times) // 4:])  # the first quarter warms caches up
    print(json.dumps({"device": device, "median_step": settled[len(settled) // 2]}))
""")


def step_time(script: Path, steps: int, env: dict[str, str] | None) -> tuple[str, float]:
    out = subprocess.run([sys.executable, str(script), str(steps)], capture_output=True, text=True, env=env,
                         check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return result["device"], result["median_step"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--steps", type=int, default=400)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "loop.py"
        script.write_text(LOOP)
        armed_env = run_environment(Path(scratch) / "run.vscope", armed=50)
        ratios, plain, armed = [], [], []
        for pair in range(a.pairs):
            if pair % 2 == 0:  # each side first in half the pairs
                device, t_plain = step_time(script, a.steps, None)
                device, t_armed = step_time(script, a.steps, armed_env)
            else:
                device, t_armed = step_time(script, a.steps, armed_env)
                device, t_plain = step_time(script, a.steps, None)
            plain.append(t_plain), armed.append(t_armed), ratios.append(t_armed / t_plain)
    ratios.sort()
    print(f"{device}: step {statistics.median(plain) * 1e3:.3f} ms without capture, "
          f"{statistics.median(armed) * 1e3:.3f} ms armed and waiting; ratio median x{statistics.median(ratios):.3f} "
          f"over {a.pairs} process pairs, range {ratios[0]:.3f}-{ratios[-1]:.3f}")


if __name__ == "__main__":
    main()
