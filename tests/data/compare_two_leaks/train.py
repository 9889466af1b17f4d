"""Two independent leaks, for `vramscope compare`'s GPU test (tests/python/test_compare_gpu.py) and
its benchmark (bench/compare_wall.py): the seeds' matrix in small.

Leak A: every step's logits are kept for "logging" (fix_a.patch keeps a detached scalar instead).
Leak B: toy_prefetch.py's buffer pool never returns a buffer (fix_b_monkeypatch.py, preloaded,
replaces it with one that does). Each leaks 1 MiB a step; the run is otherwise steady.
"""

import argparse

import torch

import toy_prefetch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
parser.add_argument("--batch", type=int, default=256)
parser.add_argument("--lr", type=float, default=1e-3)
args = parser.parse_args()

model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
logged = []
for step in range(args.steps):
    x = torch.randn(args.batch, 1024, device="cuda")
    logits = model(x)
    loss = logits.pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    logged.append(logits[:256].detach().clone())  # leak A: 1 MiB a step
    toy_prefetch.next_buffer(step)                # leak B: 1 MiB a step
torch.cuda.synchronize()
print(f"done: {args.steps} steps")
