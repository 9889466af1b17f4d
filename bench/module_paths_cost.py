"""The cost of module paths (Capture(module_paths=True): a hook on every module call), against the
same capture without them, on a Llama's training steps: the two take turns, one step each per
cycle, in one process, and the figure is the median of each cycle's ratio.

    python3 bench/module_paths_cost.py [--cycles 60] [--layers 8] [--device cuda]
"""
import argparse
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from vramscope.capture.session import Capture, Source

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--cycles", type=int, default=60)
ap.add_argument("--layers", type=int, default=8)
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
a = ap.parse_args()
torch.manual_seed(0)
config = LlamaConfig(vocab_size=4096, hidden_size=512, intermediate_size=1024, num_hidden_layers=a.layers,
                     num_attention_heads=8, num_key_value_heads=8)
model = LlamaForCausalLM(config).to(a.device)
opt = torch.optim.AdamW(model.parameters())
ids = torch.randint(0, 4096, (8, 256), device=a.device)
source = Source.allocator if a.device == "cuda" else Source.live_tensors
modules = sum(1 for _ in model.modules())


def step() -> float:
    if a.device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if a.device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t


def timed(paths: bool) -> float:
    with Capture(f"/tmp/module_paths_{paths}.vscope", source=source, summary=False, live_warnings=False,
                 explain=False, module_paths=paths):
        step()  # the capture's first step: its hooks and caches
        return step()


for _ in range(3):
    timed(False), timed(True)
ratios, off, on = [], [], []
for cycle in range(a.cycles):
    if cycle % 2 == 0:  # each side first in half the cycles
        t_off = timed(False)
        t_on = timed(True)
    else:
        t_on = timed(True)
        t_off = timed(False)
    off.append(t_off), on.append(t_on), ratios.append(t_on / t_off)
ratios.sort()
lo, hi = ratios[len(ratios) // 40], ratios[-1 - len(ratios) // 40]
print(f"{a.device}, {a.layers} layers, {modules} module calls a forward: step {statistics.median(off) * 1e3:.1f} ms "
      f"without module paths, {statistics.median(on) * 1e3:.1f} ms with; paired ratio median "
      f"x{statistics.median(ratios):.3f} over {a.cycles} cycles, their 95 % spread {lo:.3f}-{hi:.3f}")
