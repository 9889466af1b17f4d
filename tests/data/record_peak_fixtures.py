#!/usr/bin/env python3
"""Record the peak's fixtures (issue 39): training loops whose peak and growth inside a step have a
truth taken from the model itself, captured live with vramscope (steps from the optimizer, phases
from the capture's backward and optimizer markers).

Each scenario runs in a fresh process and writes into <out>: <name>.vscope and <name>.truth.json.
The truth holds what the parameters and buffers take (their storages), the optimizer's state after
its first step, the bytes autograd saved for backward in one forward (counted with
torch.autograd.graph.saved_tensors_hooks, by storage, parameters and the input left out),
max_memory_allocated() per step, and what each microbatch kept until its step ended.
tests/python/test_peak_fixtures.py checks the analysis against them.

Usage:
    python record_peak_fixtures.py --all [--out DIR] [--cpu]    # every scenario, a process each
    python record_peak_fixtures.py --scenario NAME [--out DIR] [--cpu]

--cpu records live tensors on the CPU (the capture's other source) at the same sizes divided by 8:
the same categories, for a machine without CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

SCENARIOS = ["peak_adamw", "peak_adamw_checkpointed", "within_step_ctx", "accum_clean", "offload_dedupe_bug",
             "offload_dedupe_fixed"]
# Offloading activations to the host means nothing where they already are: GPU only.
GPU_ONLY = {"offload_dedupe_bug", "offload_dedupe_fixed"}
MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.relpath(os.path.abspath(__file__), CHECKOUT)


def build(torch, width: int, depth: int, checkpointed: bool):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(width, 4 * width)
            self.down = nn.Linear(4 * width, width)
            self.norm = nn.LayerNorm(width)

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(depth))
            self.head = nn.Linear(width, width)

        def forward(self, x):
            for block in self.blocks:
                if checkpointed:
                    x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
                else:
                    x = block(x)
            return self.head(x)

    return Model()


def storage_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        s = t.untyped_storage()
        if s.data_ptr() not in seen:
            seen.add(s.data_ptr())
            total += s.nbytes()
    return total


def saved_for_backward(torch, model, x) -> int:
    """Bytes autograd saves in one forward, by storage, the parameters and the input left out."""
    outside = {p.untyped_storage().data_ptr() for p in model.parameters()} | {x.untyped_storage().data_ptr()}
    saved = []

    def pack(t):
        if t.untyped_storage().data_ptr() not in outside:
            saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    total = storage_bytes(saved)
    del out, saved
    return total


class KeepCtx:
    """Seed 002's custom Function: its ctx keeps a tensor; a loss kept with its grad_fn keeps it."""

    @staticmethod
    def make(torch, kept_bytes: int):
        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.kept = torch.empty(kept_bytes // 4, device=x.device)  # MARK: ctx_kept
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2

        return Scale


class OffloadActivations:
    """Seed 003 (TRL PR 6241): activations saved for backward are copied to pinned host memory and
    dropped on the GPU; a saved tensor whose storage is one already offloaded is kept as it is (a
    view, deduplicated). The GPU tensor of an offload waits in a stash until the next pack reaps it.
    The bug: the storage key stays in the map after the reap, so a new tensor the allocator puts at
    the reused address is taken for a view and stays on the GPU until backward. The fix releases
    the key when its tensor is reaped."""

    def __init__(self, torch, fixed: bool):
        self.torch, self.fixed = torch, fixed
        self.storage_to_tensor_id: dict[tuple[int, int], int] = {}
        self.stash: dict[int, tuple[tuple[int, int], object]] = {}
        self.next_id = 0
        self.kept_on_gpu = 0  # bytes taken for views and left on the GPU in the last forward

    def pack(self, t):
        torch = self.torch
        for tensor_id in list(self.stash):
            key, _ = self.stash.pop(tensor_id)
            if self.fixed:
                self.storage_to_tensor_id.pop(key, None)
        if t.device.type != "cuda" or t.numel() < 4096:
            return t
        key = (t.untyped_storage().data_ptr(), t.storage_offset())
        if key in self.storage_to_tensor_id:  # MARK: dedupe_hit
            self.kept_on_gpu += t.untyped_storage().nbytes()
            return ("gpu", t)
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        host.copy_(t)
        self.next_id += 1
        self.storage_to_tensor_id[key] = self.next_id
        self.stash[self.next_id] = (key, t)
        return ("host", host, t.device)

    def unpack(self, packed):
        if not isinstance(packed, tuple):
            return packed
        return packed[1] if packed[0] == "gpu" else packed[1].to(packed[2])

    def hooks(self):
        return self.torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)


def run(name: str, out_dir: str, cpu: bool) -> None:
    import torch
    import torch.utils.checkpoint
    from vramscope.capture.session import Capture, Source

    device = "cpu" if cpu else "cuda"
    scale = 8 if cpu else 1
    torch.manual_seed(0)
    sync = (lambda: None) if cpu else torch.cuda.synchronize
    allocated = (lambda: 0) if cpu else torch.cuda.memory_allocated
    path = os.path.join(out_dir, f"{name}.vscope")
    truth: dict = {"scenario": name, "device": device}
    source = Source.live_tensors if cpu else Source.allocator
    if name in ("peak_adamw", "peak_adamw_checkpointed"):
        width, depth, batch, steps = 1024 // scale, 4, 8192 // scale, 12
        with Capture(path, summary=False, explain=False, source=source):
            model = build(torch, width, depth, name.endswith("checkpointed")).to(device)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            truth["parameters"] = storage_bytes(list(model.parameters()) + list(model.buffers()))
            peaks = []
            for step in range(steps):
                if not cpu:
                    torch.cuda.reset_peak_memory_stats()
                x = torch.randn(batch, width, device=device)
                if step == 0:
                    truth["saved_for_backward"] = saved_for_backward(torch, model, x)
                loss = model(x).square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                if step == 0:
                    truth["optimizer_state"] = storage_bytes(
                        [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.device.type == device])
                del x, loss
                sync()
                peaks.append(torch.cuda.max_memory_allocated() if not cpu else 0)
        truth["max_memory_allocated"] = peaks
    elif name in ("within_step_ctx", "accum_clean"):
        width, microbatches, steps, kept = 512 // scale, 24, 2, 8 * MiB // scale
        keep_losses = name == "within_step_ctx"
        with Capture(path, summary=False, explain=True, source=source):
            model = build(torch, width, 2, False).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
            scale_fn = KeepCtx.make(torch, kept)
            after_backward = []
            for step in range(steps):
                losses = []
                for m in range(microbatches):
                    x = torch.randn(256, width, device=device)
                    y = scale_fn.apply(model(x)) if keep_losses else model(x)
                    loss = y.square().mean() / microbatches
                    loss.backward()
                    losses.append(loss if keep_losses else loss.item())  # MARK: losses_kept
                    sync()
                    if step == 0:
                        after_backward.append(allocated())
                    del x, y, loss
                opt.step()
                opt.zero_grad(set_to_none=True)
                del losses
        truth["microbatches"] = microbatches
        truth["steps"] = steps
        truth["kept_per_microbatch"] = kept if keep_losses else 0
        truth["allocated_after_each_backward"] = after_backward
    elif name in ("offload_dedupe_bug", "offload_dedupe_fixed"):
        width, depth, batch, steps = 1024, 4, 4096, 12
        with Capture(path, summary=False, explain=False, source=source):
            model = build(torch, width, depth, False).to(device)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            offload = OffloadActivations(torch, fixed=name.endswith("fixed"))
            peaks, kept = [], []
            for step in range(steps):
                torch.cuda.reset_peak_memory_stats()
                x = torch.randn(batch, width, device=device)
                offload.kept_on_gpu = 0
                with offload.hooks():
                    loss = model(x).square().mean()
                kept.append(offload.kept_on_gpu)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                offload.storage_to_tensor_id.clear()  # __enter__ of the next forward clears the map
                del x, loss
                sync()
                peaks.append(torch.cuda.max_memory_allocated())
        truth["max_memory_allocated"] = peaks
        truth["kept_on_gpu_per_forward"] = kept
    else:
        raise SystemExit(f"unknown scenario {name!r}")
    with open(os.path.join(out_dir, f"{name}.truth.json"), "w") as f:
        json.dump(truth, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--scenario")
    ap.add_argument("--out", default=os.path.join(HERE, "peak"))
    ap.add_argument("--cpu", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.scenario:
        return run(a.scenario, a.out, a.cpu)
    if not a.all:
        ap.error("--all or --scenario NAME")
    for name in SCENARIOS:
        if a.cpu and name in GPU_ONLY:
            continue
        cmd = [sys.executable, SCRIPT, "--scenario", name, "--out", os.path.abspath(a.out)] + (["--cpu"] if a.cpu else [])
        subprocess.run(cmd, cwd=CHECKOUT, check=True)


if __name__ == "__main__":
    main()
