#!/usr/bin/env python3
"""Record real PyTorch CUDA memory-snapshot fixtures for vramscope's tests.

Each scenario is a tiny training loop run under torch's own recorder
(torch.cuda.memory._record_memory_history), dumped with
torch.cuda.memory._dump_snapshot and gzipped to <out>/<name>.pickle.gz.
Beside it, <out>/<name>.truth.json holds the ground truth: the allocator's
own allocated/reserved counters after every optimizer step and what the
script deliberately leaks (bytes per step, file/function/line of the
allocation that leaks, which stream it is on).

Usage:
    python record_fixtures.py --all --out DIR [--tar FILE]   # every scenario,
        each in a fresh subprocess, then SCHEMA_NOTES.txt (and a tar of DIR)
    python record_fixtures.py --scenario NAME --out DIR      # one scenario
    python record_fixtures.py --describe FILE.pickle.gz      # schema summary
    python record_fixtures.py --all --dry-cpu                # logic check on
        CPU: runs the loops without CUDA or recording, writes nothing; where a
        scenario watches its leak's holders (Run.watch), checks their bytes at
        every step end and the leak's kind against the truth
    python record_fixtures.py --all --only A,B --out DIR     # some scenarios
    python record_fixtures.py --scenario NAME --plain TRUTH.json  # record
        nothing (run it under `vramscope run`): only the truth, to that file

Needs a CUDA GPU (except --describe and --dry-cpu). Models are small so that
each .pickle.gz stays well under 1 MiB.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gzip
import itertools
import json
import os
import pickle
import random
import subprocess
import sys
import tarfile
import time

SCENARIOS = [
    "leak_ctx_losses",
    "leak_offload_stream",
    "clean_adamw_accum",
    "clean_varlen",
    "bounded_lru_cache",
    # The shapes of real runs (issue 9): where the holder lives, compiled code, eval, side streams
    # whose growth slows, partial recordings, the allocator's other mode, C++ stacks.
    "leak_main_local",
    "leak_trainer_attr",
    "leak_compiled_outputs",
    "leak_eval_no_grad",
    "leak_offload_slowing",
    "leak_ring_wrap",
    "leak_expandable_segments",
    "leak_stacks_all",
    # Issue 20: each class of leak, as a public bug report showed it (the URL above each scenario).
    "leak_eval_concat",
    "leak_metric_reclone",
    "leak_kv_cache_turns",
    "leak_hook_no_grad",
    "leak_loader_registry",
    "leak_several_sizes",
]

# Recorder settings other than the default (stacks="python", max_entries=1_000_000), per scenario.
RECORDING = {
    "leak_ring_wrap": {"max_entries": 2_000},  # keeps about the last 20 of 60 steps
    "leak_stacks_all": {"stacks": "all"},
}
# Environment set before torch starts, per scenario.
ENVIRONMENT = {"leak_expandable_segments": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}}

STEPS = 30
SCRIPT_FILE = os.path.basename(__file__)
BLOCK_ROUND = 512  # the CUDA caching allocator rounds every block up to 512 B


def round_block(nbytes: int) -> int:
    return (nbytes + BLOCK_ROUND - 1) // BLOCK_ROUND * BLOCK_ROUND


def marker_line(marker: str) -> int:
    """Line number of the (single) source line carrying `# MARK: <marker>`."""
    tag = "# MARK: " + marker
    with open(os.path.abspath(__file__), encoding="utf-8") as f:
        hits = [i for i, line in enumerate(f, 1) if line.rstrip().endswith(tag)]
    if len(hits) != 1:
        raise RuntimeError(f"marker {marker!r} found {len(hits)} times")
    return hits[0]


def site(function: str, marker: str) -> dict:
    return {"file": SCRIPT_FILE, "function": function, "line": marker_line(marker)}


# --------------------------------------------------------------------------
# Recording harness
# --------------------------------------------------------------------------


class Run:
    """Device, recording and per-step truth for one scenario."""

    def __init__(self, name: str, out_dir: str | None, dry_cpu: bool, live: str | None = None,
                 plain: str | None = None):
        import torch

        self.torch = torch
        self.name = name
        self.out_dir = out_dir
        self.dry = dry_cpu
        self.live = live  # capture with vramscope.track() into this .vscope instead of torch's recorder
        self.plain = plain  # record nothing (`vramscope run` captures): only the truth, to this path
        self.recording = {"enabled": "all", "context": "all", "stacks": "python", "max_entries": 1_000_000,
                          **RECORDING.get(name, {})}
        self.device = torch.device("cpu" if dry_cpu else "cuda")
        self.steps: list[dict] = []
        self.watched: dict = {}  # leak name -> what its holder holds now (see watch())
        self.held_storages: dict[str, list[set]] = {}
        torch.manual_seed(1234)
        random.seed(1234)
        if not dry_cpu:
            torch.cuda.init()
            assert torch.cuda.memory_allocated() == 0, "GPU not empty at start"

    def start(self):
        if self.dry or self.plain:
            return
        if self.live:
            import vramscope

            self.capture = vramscope.track(self.live, summary=False).start()
            return
        self.torch.cuda.memory._record_memory_history(**self.recording)

    def watch(self, **holders):
        """Each leak's holder, read at every step end: name -> a function giving the tensors it holds
        now. The steps then carry held_bytes (name -> bytes of the distinct storages held, as the
        allocator's blocks: rounded up to 512 B), and finish() checks them against the expected
        components: every step's growth, and the kind (survivors: what was held stays held;
        replacement: as many buffers, each replaced by a bigger one). This is what --dry-cpu checks,
        where there is no memory_allocated(); reading it allocates nothing on the device."""
        self.watched = holders
        self.held_storages = {name: [] for name in holders}

    def held(self) -> dict:
        out = {}
        for name, holder in self.watched.items():
            storages = {}
            for t in holder():
                s = t.untyped_storage()
                storages[s.data_ptr()] = round_block(s.nbytes())
            self.held_storages[name].append(set(storages))
            out[name] = sum(storages.values())
        return out

    def record_step(self, i: int, user_step: bool = False, **extra):
        """user_step: a loop with no optimizer, whose steps a live capture takes from
        vramscope.step(), as its user would mark an eval batch or a chat turn."""
        torch = self.torch
        if user_step and (self.live or self.plain):
            import vramscope

            vramscope.step()
        if self.dry:
            alloc = resv = 0
        else:
            torch.cuda.synchronize()
            alloc = torch.cuda.memory_allocated()
            resv = torch.cuda.memory_reserved()
        entry = {"step": i, "allocated": alloc, "reserved": resv,
                 "time_us": int(time.time() * 1e6)}
        entry.update(extra)
        if self.watched:
            entry["held_bytes"] = self.held()
        self.steps.append(entry)
        print(f"  [{self.name}] step {i:2d} allocated={alloc:>12,d} reserved={resv:>12,d}"
              + "".join(f" {k}={v}" for k, v in entry.items() if k in extra or k == "held_bytes"), flush=True)

    def check_held(self, expected: dict):
        """The watched holders against the expected components (see watch()); raises on a mismatch."""
        components = {c["name"]: c for c in expected.get("leak_components", [])}
        problems = []
        for name, storages in self.held_storages.items():
            c = components[name]
            series = [s["held_bytes"][name] for s in self.steps]
            each = c.get("bytes_each_step") or [c["bytes"]] * len(series)
            want = list(itertools.accumulate(each))
            if series != want:
                problems.append(f"{name}: held {series} per step, expected {want}")
            if abs(sum(each) / len(each) - c["bytes"]) > 0.01 * c["bytes"]:
                problems.append(f"{name}: mean growth {sum(each) / len(each):.0f} B, expected {c['bytes']}")
            for k, (a, b) in enumerate(zip(storages, storages[1:]), 1):
                if c["kind"] == "survivors" and not a <= b:
                    problems.append(f"{name}: step {k} freed what step {k - 1} held (kind survivors)")
                if c["kind"] == "replacement" and (len(a) != len(b) or (a == b and each[k] > 0)):
                    problems.append(f"{name}: step {k} holds {len(b)} buffers (before: {len(a)}), "
                                    f"{'the same ones' if a == b else 'not one each replaced'} (kind replacement)")
        if len(self.steps) > 2 and not self.dry:  # memory_allocated() itself: the rate a reader should find
            ys = [s["allocated"] for s in self.steps[1:]]
            n = len(ys)
            xm, ym = (n - 1) / 2, sum(ys) / n
            slope = sum((x - xm) * (y - ym) for x, y in enumerate(ys)) / sum((x - xm) ** 2 for x in range(n))
            rate = expected["leak_bytes_per_step"]
            print(f"CHECK {self.name}: memory_allocated() least-squares slope from step 1: {slope:,.0f} B per "
                  f"{expected.get('unit', 'step')}, expected {rate:,.0f} "
                  + ("(ok)" if abs(slope - rate) <= 0.10 * rate else "(WARNING: off by more than 10%)"), flush=True)
        if problems:
            raise AssertionError(f"{self.name}: the leak's holders do not match the truth:\n  " + "\n  ".join(problems))
        print(f"CHECK {self.name}: held bytes and kind match the truth for "
              + ", ".join(f"{n} ({components[n]['kind']}, {components[n]['bytes']:,.0f} B per "
                          f"{expected.get('unit', 'step')})" for n in self.held_storages), flush=True)

    def stream(self, s):
        return contextlib.nullcontext() if self.dry else self.torch.cuda.stream(s)

    def new_stream(self):
        return None if self.dry else self.torch.cuda.Stream()

    def finish(self, description: str, expected: dict, extra: dict | None = None):
        torch = self.torch
        truth = {
            "scenario": self.name,
            "description": description,
            "steps": self.steps,
            "expected": expected,
            "torch_version": torch.__version__,
            "device_name": None if self.dry else torch.cuda.get_device_name(0),
            "device_total_memory": None if self.dry
            else torch.cuda.get_device_properties(0).total_memory,
            "recorder": self.recording,
        }
        if extra:
            truth.update(extra)
        if self.watched:
            self.check_held(expected)
        if len(self.steps) >= 2:
            a0, a1 = self.steps[1]["allocated"], self.steps[-1]["allocated"]
            truth["measured_slope_bytes_per_step_from_step1"] = (a1 - a0) / (len(self.steps) - 2 or 1)
        if self.dry:
            print("DRY expected:", json.dumps({k: v for k, v in truth.items() if k != "steps"})[:3000])
            return truth
        if self.live or self.plain:
            if self.live:
                self.capture.stop()
            with open(self.plain or self.live + ".steps.json", "w") as f:
                json.dump(truth, f, indent=1)
            return truth
        os.makedirs(self.out_dir, exist_ok=True)
        plain = os.path.join(self.out_dir, f".{self.name}.pickle.tmp")
        torch.cuda.memory._dump_snapshot(plain)
        torch.cuda.memory._record_memory_history(enabled=None)
        with open(plain, "rb") as f:
            raw = checkout_relative(f.read())
        os.remove(plain)
        gz_path = os.path.join(self.out_dir, f"{self.name}.pickle.gz")
        with open(gz_path, "wb") as f:
            f.write(gzip.compress(raw, compresslevel=9, mtime=0))
        snap = pickle.loads(raw)
        truth["snapshot_stats"] = {
            "plain_pickle_bytes": len(raw),
            "gz_bytes": os.path.getsize(gz_path),
            "trace_entries_per_device": [len(t) for t in snap["device_traces"]],
            "segments": len(snap["segments"]),
            "external_annotations": len(snap.get("external_annotations", []) or []),
        }
        with open(os.path.join(self.out_dir, f"{self.name}.truth.json"), "w") as f:
            json.dump(truth, f, indent=1)
            f.write("\n")
        print(f"TRUTH {self.name}: " + json.dumps(truth), flush=True)
        print(f"  wrote {gz_path} ({os.path.getsize(gz_path):,d} B gz, {len(raw):,d} B plain), "
              f"trace entries per device {truth['snapshot_stats']['trace_entries_per_device']}",
              flush=True)
        return truth


CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def checkout_relative(raw: bytes, checkout: str = CHECKOUT) -> bytes:
    """The snapshot with this checkout's frames named relative to it (tests/data/record_fixtures.py):
    a bundled fixture must not show the recording machine's paths. Frame dicts shared in the
    snapshot stay shared, and each new name is one string, so the pickle's memo keeps it small."""
    snap = pickle.loads(raw)
    names: dict[str, str] = {}

    def walk(obj):
        if isinstance(obj, dict):
            name = obj.get("filename")
            if isinstance(name, str) and name.startswith(checkout):
                obj["filename"] = names.setdefault(name, name[len(checkout):])
            for value in obj.values():
                if isinstance(value, (dict, list)):
                    walk(value)
        elif isinstance(obj, list):
            for value in obj:
                if isinstance(value, (dict, list)):
                    walk(value)

    walk(snap)
    return pickle.dumps(snap, protocol=4)


def relativize_fixture(path: str, checkout: str) -> None:
    """A recorded fixture rewritten in place with checkout_relative (recordings made before it)."""
    with gzip.open(path, "rb") as f:
        raw = checkout_relative(f.read(), checkout)
    with open(path, "wb") as f:
        f.write(gzip.compress(raw, compresslevel=9, mtime=0))


# --------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------


def scenario_leak_ctx_losses(run: Run):
    """Fast-LLM pattern: ctx attribute + losses kept as tensors."""
    torch = run.torch
    nn = torch.nn
    B, D, H = 256, 512, 2048
    dev = run.device

    class KeepSiLU(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            ctx.kept = x.detach() * 2  # MARK: leak_ctx_losses
            return x * torch.sigmoid(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            s = torch.sigmoid(x)
            return g * (s * (1 + x * (1 - s)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(D, H)
            self.down = nn.Linear(H, D)
            self.head = nn.Linear(D, D)

        def forward(self, x):
            h = KeepSiLU.apply(self.up(x))
            return self.head(torch.relu(self.down(h)))

    run.start()
    model = Block().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for i in range(STEPS):
        x = torch.randn(B, D, device=dev)
        y = torch.randn(B, D, device=dev)
        loss = nn.functional.mse_loss(model(x), y)  # MARK: leak_ctx_losses_loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss)  # BUG: keeps loss.grad_fn -> graph -> KeepSiLU ctx -> ctx.kept
        del x, y, loss
        run.record_step(i)

    kept = B * H * 4
    # F.mse_loss returns a 0-dim loss whose storage is the whole elementwise buffer
    # (float32[B, D] = 512 KiB here, not 4 B): keeping the loss tensor keeps that buffer too.
    loss_storage = round_block(losses[0].untyped_storage().nbytes())
    kept_site = site("forward", "leak_ctx_losses")
    expected = {
        "verdict": "leak",
        "leak_bytes_per_step": kept + loss_storage,
        "leak_site": kept_site,
        "leak_stream": "default",
        "leak_bytes_per_step_ctx_attribute": kept,
        "leak_components": [
            {"what": f"ctx.kept = x.detach() * 2, float32 [{B}, {H}], kept alive by the autograd ctx of "
                     "KeepSiLU, reachable from each kept loss.grad_fn", "bytes": kept, "site": kept_site},
            {"what": "the kept loss tensor itself: F.mse_loss returns a 0-dim tensor whose storage is "
                     f"the {loss_storage} B elementwise buffer; the innermost frame of this allocation "
                     "is mse_loss in torch/nn/functional.py, called from the site below",
             "bytes": loss_storage,
             "site": site("scenario_leak_ctx_losses", "leak_ctx_losses_loss")},
        ],
    }
    desc = ("MLP (Linear 512->2048, custom autograd.Function KeepSiLU, Linear 2048->512, ReLU, "
            "Linear 512->512), AdamW, batch 256, 30 steps. KeepSiLU.forward stores an extra tensor "
            "as a ctx attribute (ctx.kept, 2 MiB) besides save_for_backward; the loop appends the "
            "loss TENSOR (not loss.item()) to a list, so each step's graph, its ctx and ctx.kept "
            f"stay alive: {kept} B per step from ctx.kept plus {loss_storage} B for the kept loss "
            "itself (F.mse_loss's 0-dim result is backed by its full elementwise buffer).")
    run.finish(desc, expected)


def scenario_leak_offload_stream(run: Run):
    """TRL OffloadActivations pattern: saved-tensor hooks stash copies on a side stream."""
    torch = run.torch
    nn = torch.nn
    B, D, H = 256, 512, 1024
    dev = run.device
    side = run.new_stream()
    stash: dict[int, object] = {}
    counter = [0]
    step_log: list[tuple[tuple[int, ...], int]] = []
    param_ptrs: set[int] = set()

    def pack_to_side_stream(t):
        if t.device.type != dev.type or t.data_ptr() in param_ptrs or t.numel() * t.element_size() < 1024:
            return ("raw", t)  # parameters / small tensors are not offloaded
        if side is not None:
            side.wait_stream(torch.cuda.current_stream())
        with run.stream(side):
            stash_copy = t.detach().clone()  # MARK: leak_offload_stream
        key = counter[0]
        counter[0] += 1
        stash[key] = stash_copy  # BUG: never removed after backward
        step_log.append((tuple(t.shape), t.numel() * t.element_size()))
        return ("key", key)

    def unpack_from_stash(packed):
        kind, val = packed
        if kind == "raw":
            return val
        if side is not None:
            torch.cuda.current_stream().wait_stream(side)
        return stash[val]

    run.start()
    model = nn.Sequential(nn.Linear(D, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU(),
                          nn.Linear(H, D)).to(dev)
    param_ptrs.update(p.data_ptr() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    per_step_bytes = []
    stashed_shapes = None
    for i in range(STEPS):
        step_log.clear()
        x = torch.randn(B, D, device=dev)
        with torch.autograd.graph.saved_tensors_hooks(pack_to_side_stream, unpack_from_stash):
            out = model(x)
            loss = out.pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, out, loss
        per_step_bytes.append(sum(round_block(n) for _, n in step_log))
        if stashed_shapes is None:
            stashed_shapes = [list(s) for s, _ in step_log]
        run.record_step(i, stash_entries=len(stash))

    assert len(set(per_step_bytes)) == 1, per_step_bytes
    expected = {
        "verdict": "leak",
        "leak_bytes_per_step": per_step_bytes[0],
        "leak_site": site("pack_to_side_stream", "leak_offload_stream"),
        "leak_stream": "side",
        "leak_bytes_per_step_allocated": per_step_bytes[0],
        "stashed_tensors_per_step": {"count": len(stashed_shapes), "dtype": "float32",
                                     "shapes": stashed_shapes},
    }
    desc = ("MLP (Linear 512->1024, ReLU, Linear 1024->1024, ReLU, Linear 1024->512), AdamW, batch "
            "256, 30 steps, under torch.autograd.graph.saved_tensors_hooks: the pack hook clones "
            "every saved activation (not parameters) on a side stream (torch.cuda.Stream) into a "
            "dict keyed by a counter and returns the key; unpack returns the stashed copy; the dict "
            "is never cleared, so every step's activation copies leak, allocated on the side stream.")
    run.finish(desc, expected)


def scenario_clean_adamw_accum(run: Run):
    torch = run.torch
    nn = torch.nn
    B, D, H, MICRO = 64, 512, 1024, 4
    dev = run.device
    run.start()
    model = nn.Sequential(nn.Linear(D, H), nn.GELU(), nn.Linear(H, H), nn.GELU(),
                          nn.Linear(H, D)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for i in range(STEPS):
        for _ in range(MICRO):
            x = torch.randn(B, D, device=dev)
            y = torch.randn(B, D, device=dev)
            loss = nn.functional.mse_loss(model(x), y) / MICRO
            loss.backward()
            losses.append(loss.item())  # a float: nothing kept on the GPU
            del x, y, loss
        opt.step()
        opt.zero_grad(set_to_none=True)
        run.record_step(i)
    expected = {"verdict": "no-leak", "leak_bytes_per_step": 0, "leak_site": None,
                "leak_stream": None,
                "notes": "AdamW allocates exp_avg/exp_avg_sq at the first opt.step(): a one-off "
                         "warm-up rise at step 0, flat afterwards."}
    desc = ("Clean MLP (Linear 512->1024, GELU, Linear 1024->1024, GELU, Linear 1024->512), AdamW, "
            "gradient accumulation over 4 microbatches of 64 per optimizer step, 30 optimizer steps, "
            "losses kept as Python floats (loss.item()). No leak; AdamW state appears at step 0.")
    run.finish(desc, expected)


def scenario_clean_varlen(run: Run):
    torch = run.torch
    nn = torch.nn
    B, D = 8, 256
    dev = run.device
    rng = random.Random(4321)
    run.start()
    model = nn.Sequential(
        nn.TransformerEncoderLayer(D, 4, 1024, batch_first=True, dropout=0.0),
        nn.TransformerEncoderLayer(D, 4, 1024, batch_first=True, dropout=0.0),
        nn.Linear(D, D),
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    lengths = []
    for i in range(STEPS):
        # random length in [hi/3, hi]; hi ramps 128 -> 512 over the run (a length curriculum),
        # so new, larger activation sizes keep appearing and the cache keeps growing.
        hi = 128 + (512 - 128) * i // (STEPS - 1)
        seq = rng.randint(max(16, hi // 3), hi)
        lengths.append(seq)
        x = torch.randn(B, seq, D, device=dev)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, loss
        run.record_step(i, seq_len=seq)
    expected = {"verdict": "no-leak", "leak_bytes_per_step": 0, "leak_site": None,
                "leak_stream": None,
                "notes": "reserved memory creeps up as larger sequence lengths arrive (allocator "
                         "cache growth / fragmentation) while allocated after each step stays flat."}
    desc = ("Clean 2-layer nn.TransformerEncoderLayer(256, 4, 1024, batch_first, dropout 0) + Linear, "
            "AdamW, batch 8, random sequence length per step (seeded; uniform in max(16, hi/3)..hi "
            "with hi ramping 128->512), 30 steps. Reserved grows, allocated stays flat. No leak.")
    run.finish(desc, expected, {"seq_lengths": lengths})


def scenario_bounded_lru_cache(run: Run):
    torch = run.torch
    nn = torch.nn
    D, MAXN = 512, 8
    shapes = [64 * k for k in range(1, 13)]  # 12 distinct row counts
    dev = run.device
    rng = random.Random(99)
    cache: collections.OrderedDict[int, object] = collections.OrderedDict()

    def positional_table(rows):
        if rows in cache:
            cache.move_to_end(rows)
            return cache[rows]
        pos = torch.arange(rows, device=dev, dtype=torch.float32)[:, None]
        freq = torch.arange(D, device=dev, dtype=torch.float32)[None, :]
        table = torch.sin(pos * 1e-2 * (freq + 1))  # MARK: bounded_lru_cache
        cache[rows] = table
        while len(cache) > MAXN:
            cache.popitem(last=False)  # evict the least recently used
        return table

    run.start()
    model = nn.Sequential(nn.Linear(D, 1024), nn.ReLU(), nn.Linear(1024, D)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    keys = []
    for i in range(STEPS):
        rows = rng.choice(shapes)
        keys.append(rows)
        x = torch.randn(rows, D, device=dev) + positional_table(rows)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, loss
        cached = sum(round_block(t.numel() * t.element_size()) for t in cache.values())
        run.record_step(i, rows=rows, cache_entries=len(cache), cache_bytes=cached)
    expected = {"verdict": "no-leak", "leak_bytes_per_step": 0, "leak_site": None,
                "leak_stream": None,
                "decoy_site": site("positional_table", "bounded_lru_cache"),
                "cache_max_entries": MAXN,
                "cache_max_bytes": sum(round_block(r * D * 4) for r in shapes[-MAXN:]),
                "notes": "memory grows while the LRU cache fills (decoy_site allocates the cached "
                         "tables) and saturates at 8 entries; it then only moves with which keys "
                         "are cached."}
    desc = ("Clean MLP (Linear 512->1024, ReLU, Linear 1024->512), AdamW, 30 steps; each step picks "
            "one of 12 row counts (64..768) at random (seeded) and adds a positional table "
            "float32[rows, 512] taken from an LRU cache (OrderedDict, at most 8 entries, oldest "
            "evicted). Memory rises then saturates. No leak.")
    run.finish(desc, expected, {"row_keys": keys, "shapes": shapes})


# --- the shapes of real runs ------------------------------------------------


def mlp_and_optimizer(run: Run, d: int = 1024, h: int = 1024):
    nn = run.torch.nn
    model = nn.Sequential(nn.Linear(d, h), nn.ReLU(), nn.Linear(h, d)).to(run.device)
    return model, run.torch.optim.AdamW(model.parameters(), lr=1e-3)


def train_step(model, opt, x):
    out = model(x)
    out.pow(2).mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return out


def leak_expected(function: str, marker: str, per_step: int, owner: tuple, **more) -> dict:
    """A leak's truth: its site, bytes a step, and who holds it: (the owner path's possible starts,
    a hop it passes through)."""
    starts = [owner[0]] if isinstance(owner[0], str) else list(owner[0])
    return {"verdict": "leak", "leak_bytes_per_step": per_step, "leak_site": site(function, marker),
            "leak_stream": "default", "owner": {"starts": starts, "through": owner[1]}, **more}


def scenario_leak_main_local(run: Run):
    """The usual script: the list that keeps each step's output is a local of the training function."""
    B, D = 256, 1024
    run.start()
    model, opt = mlp_and_optimizer(run, D)
    history = []
    for i in range(STEPS):
        out = train_step(model, opt, run.torch.randn(B, D, device=run.device))
        history.append(out.detach().clone())  # MARK: leak_main_local
        del out
        run.record_step(i)
    expected = leak_expected("scenario_leak_main_local", "leak_main_local", B * D * 4,
                             ("scenario_leak_main_local() local 'history'[", ""))
    run.finish("MLP 1024-1024-1024, AdamW, batch 256, 30 steps; each step's output (1 MiB) is appended to a "
               "list that is a local of the training function, never cleared.", expected)


def scenario_leak_trainer_attr(run: Run):
    """Lightning's training_step_outputs pattern: a trainer object, itself a local, keeps each step's logits."""
    B, D = 256, 1024

    class Trainer:
        def __init__(self, model, opt):
            self.model, self.opt = model, opt
            self.step_outputs = []

        def training_step(self, x):
            logits = self.model(x)  # MARK: leak_trainer_attr
            logits.pow(2).mean().backward()
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            self.step_outputs.append(logits)  # kept for an epoch-end hook that never comes

    run.start()
    trainer = Trainer(*mlp_and_optimizer(run, D))
    for i in range(STEPS):
        trainer.training_step(run.torch.randn(B, D, device=run.device))
        run.record_step(i)
    expected = leak_expected("training_step", "leak_trainer_attr", B * D * 4,
                             # found at a step, inside training_step: `self` there, `trainer` outside
                             (("scenario_leak_trainer_attr() local 'trainer'", "training_step() local 'self'"),
                              ".step_outputs["))
    run.finish("MLP 1024-1024-1024, AdamW, batch 256, 30 steps, driven by a Trainer object (a local) whose "
               "training_step appends its logits (1 MiB, with their grad_fn) to self.step_outputs.", expected)


def scenario_leak_compiled_outputs(run: Run):
    """A torch.compile'd model whose outputs are kept: the allocation happens in inductor's generated code."""
    B, D = 256, 1024
    run.start()
    model, opt = mlp_and_optimizer(run, D)
    compiled = run.torch.compile(model)
    kept = []
    for i in range(STEPS):
        x = run.torch.randn(B, D, device=run.device)
        out = compiled(x)  # MARK: leak_compiled_outputs
        out.pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        kept.append(out)
        del x, out
        run.record_step(i)
    expected = leak_expected("scenario_leak_compiled_outputs", "leak_compiled_outputs", B * D * 4,
                             ("scenario_leak_compiled_outputs() local 'kept'[", ""))
    run.finish("torch.compile(MLP 1024-1024-1024), AdamW, batch 256, 30 steps; each step's compiled output "
               "(1 MiB, allocated by inductor's generated code) is kept in a list.", expected)


def scenario_leak_eval_no_grad(run: Run):
    """Eval without torch.no_grad(): summing the eval loss as a tensor keeps every eval's graph."""
    B, D = 256, 1024
    run.start()
    model, opt = mlp_and_optimizer(run, D)
    eval_total = 0.0
    for i in range(STEPS):
        train_step(model, opt, run.torch.randn(B, D, device=run.device))
        x_eval = run.torch.randn(B, D, device=run.device)
        eval_total = eval_total + model(x_eval).pow(2).mean()  # MARK: leak_eval_no_grad
        del x_eval
        run.record_step(i)
    expected = leak_expected("scenario_leak_eval_no_grad", "leak_eval_no_grad", 0,
                             ("scenario_leak_eval_no_grad() local 'eval_total'", ".grad_fn"),
                             notes="bytes per step: the slope of memory_allocated() (the saved activations of "
                                   "each eval forward and its input)")
    run.finish("MLP 1024-1024-1024, AdamW, batch 256, 30 steps; after each step an eval batch runs without "
               "torch.no_grad() and its loss is added, as a tensor, to a running total: every eval's graph "
               "and saved activations stay alive.", expected)


def scenario_leak_offload_slowing(run: Run):
    """The seeds' TRL shape: an activation offloader on a side stream whose stash is not fully released;
    what it forgets shrinks from step to step (6 copies, then 5, ... then 1 a step) but never stops."""
    torch = run.torch
    B, D, H = 256, 512, 1024
    dev = run.device

    class Offloader:
        def __init__(self):
            self.stream = run.new_stream()
            self.tracker: dict[int, tuple] = {}
            self.step_keys: list[int] = []
            self.counter = 0
            self.params: set[int] = set()

        def pack(self, t):
            if t.device.type != dev.type or t.data_ptr() in self.params or t.numel() * t.element_size() < 1024:
                return ("raw", t)
            if self.stream is not None:
                self.stream.wait_stream(torch.cuda.current_stream())
            with run.stream(self.stream):
                copy = t.detach().clone()  # MARK: leak_offload_slowing
            self.counter += 1
            self.tracker[self.counter] = (copy, tuple(t.shape))
            self.step_keys.append(self.counter)
            return ("key", self.counter)

        def unpack(self, packed):
            kind, value = packed
            if kind == "raw":
                return value
            if self.stream is not None:
                torch.cuda.current_stream().wait_stream(self.stream)
                self.tracker[value][0].record_stream(torch.cuda.current_stream())
            return self.tracker[value][0]

        def end_step(self, step):
            keep = max(1, 6 - step // 6)  # BUG: the first `keep` copies of the step are never released
            for key in self.step_keys[keep:]:
                del self.tracker[key]
            self.step_keys.clear()

    steps = 40
    run.start()
    nn = torch.nn
    model = nn.Sequential(nn.Linear(D, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU(), nn.Linear(H, D)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    offload = Offloader()
    offload.params.update(p.data_ptr() for p in model.parameters())
    for i in range(steps):
        x = torch.randn(B, D, device=dev)
        with torch.autograd.graph.saved_tensors_hooks(offload.pack, offload.unpack):
            loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        offload.end_step(i)
        del x, loss
        run.record_step(i, tracker_entries=len(offload.tracker))
    expected = leak_expected("pack", "leak_offload_slowing", 0,
                             ("scenario_leak_offload_slowing() local 'offload'", ".tracker["),
                             leak_stream="side", shape="slowing",
                             notes="bytes per step: the slope of memory_allocated() over the judged steps; "
                                   "the growth slows (6 stashed copies a step, then 5, ... then 1) but never stops")
    run.finish("MLP 512-1024-1024-512, AdamW, batch 256, 40 steps, with saved_tensors_hooks that clone each "
               "activation on a side stream into an Offloader's tracker; end_step releases all but the first "
               "max(1, 6 - step // 6) copies of the step, so the leak slows but never stops.", expected)


def scenario_leak_ring_wrap(run: Run):
    """A long run recorded with a small ring buffer (torch keeps the last max_entries entries), or
    captured live from step 20 on: the trace covers only the end of the run."""
    B, D = 256, 1024
    steps, live_from = 60, 20
    if not run.live:
        run.start()
    model, opt = mlp_and_optimizer(run, D)
    keep = []
    for i in range(steps):
        if run.live and i == live_from:
            run.start()
        out = train_step(model, opt, run.torch.randn(B, D, device=run.device))
        keep.append(out.detach() + 1)  # MARK: leak_ring_wrap
        del out
        run.record_step(i)
    expected = leak_expected("scenario_leak_ring_wrap", "leak_ring_wrap", B * D * 4,
                             ("scenario_leak_ring_wrap() local 'keep'[", ""),
                             live_capture_from_step=live_from)
    run.finish("MLP 1024-1024-1024, AdamW, batch 256, 60 steps, 1 MiB kept per step; recorded with "
               "max_entries=2000 (the ring buffer wraps: the snapshot holds about the last 20 steps), or "
               "captured live from step 20.", expected)


def scenario_leak_expandable_segments(run: Run):
    """PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments grow by mapping pages."""
    B, D = 256, 1024
    run.start()
    model, opt = mlp_and_optimizer(run, D)
    cache = {}
    for i in range(STEPS):
        out = train_step(model, opt, run.torch.randn(B, D, device=run.device))
        cache[i] = out.detach() * 2  # MARK: leak_expandable_segments
        del out
        run.record_step(i)
    expected = leak_expected("scenario_leak_expandable_segments", "leak_expandable_segments", B * D * 4,
                             ("scenario_leak_expandable_segments() local 'cache'[", ""),
                             allocator_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF"))
    run.finish("MLP 1024-1024-1024, AdamW, batch 256, 30 steps, expandable segments; 1 MiB a step kept in a "
               "dict keyed by step.", expected)


def scenario_leak_stacks_all(run: Run):
    """Recorded with stacks="all": every stack starts with torch's unwinder and allocator frames."""
    B, D = 256, 1024
    run.start()
    model, opt = mlp_and_optimizer(run, D)
    saved = []
    for i in range(STEPS):
        out = train_step(model, opt, run.torch.randn(B, D, device=run.device))
        saved.append(out.detach().clone())  # MARK: leak_stacks_all
        del out
        run.record_step(i)
    expected = leak_expected("scenario_leak_stacks_all", "leak_stacks_all", B * D * 4,
                             ("scenario_leak_stacks_all() local 'saved'[", ""))
    run.finish("MLP 1024-1024-1024, AdamW, batch 256, 30 steps, 1 MiB kept per step; recorded with "
               "stacks='all' (C++ frames first in every stack).", expected)


# --- issue 20: each class of leak, after a public bug report -----------------------------------
# Expected fields beyond leak_expected()'s: `kind` (survivors: each step's leaked blocks stay alive;
# replacement: the holder frees its buffer and allocates a bigger one each step, so no block of a
# step survives the next), `unit` (what one step of `steps` is, as a user counts it) and
# `leak_components` (one per leaking site: name, what, bytes per unit, site, stream, owner, kind;
# `bytes_each_step` where the growth differs from step to step). The top-level site, stream, owner
# and kind are those of the largest component; leak_bytes_per_step is the sum of all of them.


def leak_component(name: str, what: str, function: str, marker: str, per_step: float, owner: tuple, kind: str,
                   stream: str = "default", **more) -> dict:
    starts = [owner[0]] if isinstance(owner[0], str) else list(owner[0])
    return {"name": name, "what": what, "bytes": per_step, "site": site(function, marker), "stream": stream,
            "owner": {"starts": starts, "through": owner[1]}, "kind": kind, **more}


def components_expected(components: list[dict], unit: str, **more) -> dict:
    top = max(components, key=lambda c: c["bytes"])
    return {"verdict": "leak", "leak_bytes_per_step": sum(c["bytes"] for c in components), "leak_site": top["site"],
            "leak_stream": top["stream"], "owner": top["owner"], "kind": top["kind"], "unit": unit,
            "leak_components": components, **more}


# Re-creates https://github.com/huggingface/transformers/issues/7232 (eval predictions concatenated on the GPU).
def scenario_leak_eval_concat(run: Run):
    """Eval loop (model.eval(), torch.no_grad(), no optimizer) that concatenates each batch's outputs
    into one GPU tensor: each batch frees the old buffer and allocates one a batch bigger."""
    torch = run.torch
    nn = torch.nn
    B, D, C = 256, 1024, 1024
    dev = run.device
    run.start()
    model = nn.Sequential(nn.Linear(D, D), nn.ReLU(), nn.Linear(D, C)).to(dev)
    model.eval()
    all_preds = torch.empty(0, C, device=dev)  # no block: the caching allocator hands out nothing for 0 B
    run.watch(eval_concat=lambda: [all_preds])
    with torch.no_grad():
        for i in range(STEPS):
            x = torch.randn(B, D, device=dev)
            out = model(x)
            all_preds = torch.cat([all_preds, out])  # MARK: leak_eval_concat
            del x, out
            run.record_step(i, user_step=True, rows=all_preds.shape[0])
    per_batch = round_block(B * C * 4)
    expected = components_expected([leak_component(
        "eval_concat", f"all_preds = torch.cat([all_preds, out]): float32 [{B}, {C}] more each eval batch; the "
        "old buffer is freed as the new one is made", "scenario_leak_eval_concat", "leak_eval_concat", per_batch,
        ("scenario_leak_eval_concat() local 'all_preds'", ""), "replacement")], unit="eval batch")
    run.finish(f"MLP 1024-1024-{C} in eval mode under torch.no_grad(), no optimizer, 30 eval batches of {B}; "
               "each batch's outputs are concatenated on the GPU into one tensor (all_preds = torch.cat(...)): "
               f"growth by replacement, {per_batch} B per eval batch, with no block surviving the next batch.",
               expected)


# Re-creates https://github.com/Lightning-AI/torchmetrics/issues/3294 (a metric called each step grows GPU memory).
def scenario_leak_metric_reclone(run: Run):
    """A metric module whose forward() copies its whole stored history and concatenates the batch
    onto it, every optimizer step: the state grows by replacement."""
    torch = run.torch
    nn = torch.nn
    B, D, K = 256, 1024, 512
    dev = run.device

    class RunningAveragePrecision(nn.Module):
        def __init__(self):
            super().__init__()
            self.scores = torch.empty(0, K, device=dev)  # a plain attribute, as Metric.add_state makes

        def forward(self, logits):
            batch = logits.detach()[:, :K].sigmoid()
            history = self.scores.clone()  # the global state copied before the batch is merged in
            self.scores = torch.cat([history, batch])  # MARK: leak_metric_reclone
            return self.scores.mean()

    run.start()
    model, opt = mlp_and_optimizer(run, D)
    metric = RunningAveragePrecision()
    run.watch(metric_state=lambda: [metric.scores])
    for i in range(STEPS):
        out = train_step(model, opt, torch.randn(B, D, device=dev))
        value = metric(out)
        del out, value
        run.record_step(i)
    per_step = round_block(B * K * 4)
    expected = components_expected([leak_component(
        "metric_state", f"metric.scores = torch.cat([metric.scores.clone(), batch]): float32 [{B}, {K}] more each "
        "step; the previous state and its clone are freed", "forward", "leak_metric_reclone", per_step,
        (("scenario_leak_metric_reclone() local 'metric'", "forward() local 'self'"), ".scores"), "replacement")],
        unit="optimizer step")
    run.finish(f"MLP 1024-1024-1024, AdamW, batch {B}, 30 steps; a metric module called every step clones its "
               f"whole stored state and concatenates the batch's sigmoid scores (float32 [{B}, {K}]) onto it: "
               f"growth by replacement, {per_step} B per optimizer step.", expected)


# Re-creates https://github.com/lm-sys/FastChat/issues/3223 (GPU memory keeps growing with more chat turns).
def scenario_leak_kv_cache_turns(run: Run):
    """Inference, no optimizer: a chat session's KV cache is kept across turns and never trimmed.
    Each turn is one generate() call: a 16-token prompt, then 8..24 decode tokens; every token is
    concatenated onto each layer's cache (growth by replacement, per token). Truth per turn."""
    torch = run.torch
    nn = torch.nn
    B, D, L, VOCAB, PROMPT = 4, 256, 2, 512, 16
    dev = run.device
    rng = random.Random(2024)

    class KVCache:
        def __init__(self, layers):
            self.kv = [torch.empty(2, B, 0, D, device=dev) for _ in range(layers)]

        def update(self, layer, k, v):
            self.kv[layer] = torch.cat([self.kv[layer], torch.stack([k, v])], dim=2)  # MARK: leak_kv_cache_turns
            return self.kv[layer][0], self.kv[layer][1]

        def tokens(self):
            return self.kv[0].shape[2]

    class TinyChatModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, D)
            self.qkv = nn.ModuleList(nn.Linear(D, 3 * D) for _ in range(L))
            self.proj = nn.ModuleList(nn.Linear(D, D) for _ in range(L))
            self.head = nn.Linear(D, VOCAB)

        def forward(self, ids, cache):
            h = self.embed(ids)
            for layer in range(L):
                q, k, v = self.qkv[layer](h).chunk(3, dim=-1)
                keys, values = cache.update(layer, k, v)
                att = torch.softmax(q @ keys.transpose(1, 2) / D ** 0.5, dim=-1)
                h = h + self.proj[layer](att @ values)
            return self.head(h[:, -1])

        @torch.no_grad()
        def generate(self, prompt, cache, max_new_tokens):
            logits = self(prompt, cache)
            new = []
            for _ in range(max_new_tokens):
                token = logits.argmax(-1, keepdim=True)
                new.append(token)
                logits = self(token, cache)
            return torch.cat(new, dim=1)

    run.start()
    model = TinyChatModel().to(dev).eval()
    cache = KVCache(L)
    run.watch(kv_cache=lambda: cache.kv)
    per_token = L * round_block(2 * B * D * 4)  # each layer's cache: float32 [2, B, tokens, D]
    added = []
    for turn in range(STEPS):
        new_tokens = rng.randint(8, 24)
        before = cache.tokens()
        prompt = torch.randint(0, VOCAB, (B, PROMPT), device=dev)
        reply = model.generate(prompt, cache, new_tokens)
        del prompt, reply
        added.append(cache.tokens() - before)
        run.record_step(turn, user_step=True, new_tokens=new_tokens, cache_tokens=cache.tokens())
    each = [n * per_token for n in added]
    expected = components_expected([leak_component(
        "kv_cache", f"each layer's cache float32 [2, {B}, tokens, {D}] concatenated with every new token's keys "
        f"and values ({per_token} B per token over {L} layers); prompt {PROMPT} + 8..24 new tokens a turn",
        "update", "leak_kv_cache_turns", sum(each) / len(each),
        (("scenario_leak_kv_cache_turns() local 'cache'", "generate() local 'cache'", "forward() local 'cache'"),
         ".kv["), "replacement", bytes_each_step=each, bytes_per_token=per_token)],
        unit="turn", step_boundary="one turn: one TinyChatModel.generate() call returns",
        notes="the rate varies from turn to turn with the number of tokens (see bytes_each_step); "
              "leak_bytes_per_step is its mean")
    run.finish(f"Tiny {L}-layer attention model, no optimizer, 30 chat turns of batch {B}: each turn is one "
               f"generate() call with a {PROMPT}-token prompt and 8..24 decode tokens (seeded); the KV cache is "
               "kept across turns and never trimmed; every token is concatenated onto each layer's cache, so "
               f"memory grows by replacement, {per_token} B per token, about {sum(each) / len(each):,.0f} B per turn.",
               expected, {"tokens_added_per_turn": added})


# Re-creates https://github.com/meta-pytorch/opacus/issues/176 (a forward hook keeps activations under no_grad).
def scenario_leak_hook_no_grad(run: Run):
    """A forward hook on a submodule stores a copy of its output, made under torch.no_grad() (no
    grad_fn), in a list attribute of the model, never cleared. Training loop with an optimizer."""
    torch = run.torch
    nn = torch.nn
    B, D, H = 256, 1024, 2048
    dev = run.device

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(D, H), nn.ReLU())
            self.head = nn.Linear(H, D)
            self.captured = []  # activations kept for a per-sample statistic, consumed by nothing
            self.body.register_forward_hook(self._capture)

        def _capture(self, module, args, output):
            with torch.no_grad():
                self.captured.append(output.clone())  # MARK: leak_hook_no_grad

        def forward(self, x):
            return self.head(self.body(x))

    run.start()
    model = Net().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    run.watch(hook_captures=lambda: model.captured)
    for i in range(STEPS):
        out = train_step(model, opt, torch.randn(B, D, device=dev))
        del out
        run.record_step(i, captured=len(model.captured))
    per_step = round_block(B * H * 4)
    expected = components_expected([leak_component(
        "hook_captures", f"a forward hook on model.body appends output.clone() (float32 [{B}, {H}], made under "
        "torch.no_grad(): no grad_fn) to model.captured", "_capture", "leak_hook_no_grad", per_step,
        # The training step's frame holds the model too: found live, a path may start there.
        (("scenario_leak_hook_no_grad() local 'model'", "train_step() local 'model'", "_capture() local 'self'",
          "forward() local 'self'"), ".captured["), "survivors")], unit="optimizer step")
    run.finish(f"MLP (Linear 1024->{H}, ReLU as model.body; Linear {H}->1024), AdamW, batch {B}, 30 steps; a "
               "forward hook on model.body copies its output under torch.no_grad() into the list attribute "
               f"model.captured, never cleared: {per_step} B per optimizer step, with no autograd edge to it.",
               expected)


# The registry of every loader ever prepared (leak_loader_registry): a module global, as accelerate's shared state is.
_PREPARED_LOADERS: list = []


# Re-creates https://github.com/huggingface/accelerate/issues/2234 (prepared data loaders are never released).
def scenario_leak_loader_registry(run: Run):
    """Each step prepares a new device loader (a wrapper with a GPU prefetch buffer) and the module's
    registry keeps every loader ever prepared, so every prefetch buffer stays alive."""
    torch = run.torch
    B, D, MICRO = 384, 1024, 2
    dev = run.device

    class DeviceLoader:
        """Batches of a CPU dataset, each copied into one device buffer before it is handed out."""

        def __init__(self, data):
            self.data = data
            self.prefetch = torch.empty(B, D, device=dev)  # MARK: leak_loader_registry

        def __iter__(self):
            for start in range(0, self.data.shape[0], B):
                self.prefetch.copy_(self.data[start:start + B])
                yield self.prefetch

    def prepare(loader):
        _PREPARED_LOADERS.append(loader)  # BUG: kept for the state of every loader, never dropped
        return loader

    run.start()
    model, opt = mlp_and_optimizer(run, D)
    run.watch(loader_registry=lambda: [loader.prefetch for loader in _PREPARED_LOADERS])
    for i in range(STEPS):
        loader = prepare(DeviceLoader(torch.randn(MICRO * B, D)))  # one epoch's shard, a new loader each time
        for batch in loader:
            model(batch).pow(2).mean().div(MICRO).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loader, batch
        run.record_step(i, prepared=len(_PREPARED_LOADERS))
    per_step = round_block(B * D * 4)
    expected = components_expected([leak_component(
        "loader_registry", f"each prepared DeviceLoader's prefetch buffer, float32 [{B}, {D}], kept by the module "
        "global registry _PREPARED_LOADERS", "__init__", "leak_loader_registry", per_step,
        (("__main__._PREPARED_LOADERS[", "record_fixtures._PREPARED_LOADERS["), ".prefetch"), "survivors")],
        unit="optimizer step")
    run.finish(f"MLP 1024-1024-1024, AdamW, 30 steps of {MICRO} micro-batches of {B}; each step prepares a new "
               f"loader whose prefetch buffer (float32 [{B}, {D}]) is on the GPU, and a module-level registry keeps "
               f"every prepared loader: {per_step} B per optimizer step.", expected)


# Re-creates https://github.com/huggingface/trl/pull/5700 (offload stash left on a side stream), plus two smaller leaks.
def scenario_leak_several_sizes(run: Run):
    """Three leaks of different sizes in one run: activation copies stashed on a side stream and never
    cleared (4 MiB a step, the largest), the input batches kept in a replay dict (1 MiB a step) and a
    logged sample of each step's output (256 KiB a step)."""
    torch = run.torch
    nn = torch.nn
    B, D, H, SAMPLE = 256, 1024, 4096, 64
    dev = run.device

    class Offloader:
        def __init__(self):
            self.stream = run.new_stream()
            self.fwd_stash = []

        def stash(self, t):
            if self.stream is not None:
                self.stream.wait_stream(torch.cuda.current_stream())
            with run.stream(self.stream):
                copy = t.detach().clone()  # MARK: leak_several_sizes_offload
            if self.stream is not None:
                torch.cuda.current_stream().wait_stream(self.stream)
            self.fwd_stash.append(copy)  # BUG: the stash is never cleared after backward

    class Block(nn.Module):
        def __init__(self, offloader):
            super().__init__()
            self.up = nn.Linear(D, H)
            self.down = nn.Linear(H, D)
            self.offloader = offloader

        def forward(self, x):
            h = torch.relu(self.up(x))
            self.offloader.stash(h)
            return self.down(h)

    run.start()
    offloader = Offloader()
    model = Block(offloader).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    replay = {}
    logged = []
    run.watch(offload_stash=lambda: offloader.fwd_stash, replay_inputs=lambda: replay.values(),
              logged_samples=lambda: logged)
    for i in range(STEPS):
        x = torch.randn(B, D, device=dev)  # MARK: leak_several_sizes_replay
        out = train_step(model, opt, x)
        replay[i] = x  # a replay buffer that never evicts
        logged.append(out.detach()[:SAMPLE].clone())  # MARK: leak_several_sizes_logged
        del x, out
        run.record_step(i)
    expected = components_expected([
        leak_component("offload_stash", f"relu(up(x)), float32 [{B}, {H}], cloned on a side stream "
                       "(torch.cuda.Stream) into Offloader.fwd_stash, never cleared", "stash",
                       "leak_several_sizes_offload", round_block(B * H * 4),
                       (("scenario_leak_several_sizes() local 'offloader'",
                         "scenario_leak_several_sizes() local 'model'"), ".fwd_stash["), "survivors", stream="side"),
        leak_component("replay_inputs", f"each step's input batch, float32 [{B}, {D}], kept in a dict keyed by step",
                       "scenario_leak_several_sizes", "leak_several_sizes_replay", round_block(B * D * 4),
                       ("scenario_leak_several_sizes() local 'replay'[", ""), "survivors"),
        leak_component("logged_samples", f"the first {SAMPLE} rows of each step's output, float32 [{SAMPLE}, {D}], "
                       "appended to a list", "scenario_leak_several_sizes", "leak_several_sizes_logged",
                       round_block(SAMPLE * D * 4), ("scenario_leak_several_sizes() local 'logged'[", ""), "survivors"),
    ], unit="optimizer step")
    run.finish(f"MLP (Linear 1024->{H}, ReLU, Linear {H}->1024), AdamW, batch {B}, 30 steps, three leaks: the "
               "hidden activation cloned on a side stream into an offloader's stash never cleared (4 MiB a step, "
               "the largest), each input batch kept in a replay dict (1 MiB a step), the first 64 rows of each "
               "output logged in a list (256 KiB a step).", expected)


# --------------------------------------------------------------------------
# Snapshot schema description (plain pickle data, no torch needed)
# --------------------------------------------------------------------------


def _short(v, n=160):
    s = repr(v)
    return s if len(s) <= n else s[: n - 3] + "..."


def describe_snapshot(snap: dict, full: bool = True) -> list[str]:
    L = []
    L.append(f"top-level type {type(snap).__name__}, keys: {sorted(snap.keys())}")
    traces = snap.get("device_traces", [])
    L.append(f"device_traces: {len(traces)} device list(s); entries per device: "
             f"{[len(t) for t in traces]}")
    segs = snap.get("segments", [])
    L.append(f"segments: {len(segs)}")
    ann = snap.get("external_annotations")
    L.append(f"external_annotations: {'absent' if ann is None else len(ann)}")
    for k in sorted(snap.keys()):
        if k not in ("device_traces", "segments", "external_annotations"):
            L.append(f"  top-level {k!r}: {_short(snap[k], 400)}")
    all_tr = [e for t in traces for e in t]
    acts = collections.Counter(e.get("action") for e in all_tr)
    L.append(f"trace actions: {dict(acts)}")
    streams = collections.Counter(e.get("stream") for e in all_tr)
    L.append(f"trace streams (value: count): {dict(streams)}")
    if not full:
        if ann:
            names = collections.Counter((a.get("name"), a.get("stage")) for a in ann)
            L.append(f"annotation (name, stage) counts: {dict(names)}")
        return L
    keys_by_action = collections.defaultdict(set)
    for e in all_tr:
        keys_by_action[e.get("action")].update(e.keys())
    L.append("trace entry keys by action:")
    for a, ks in keys_by_action.items():
        L.append(f"  {a}: {sorted(ks)}")
    L.append("example trace entries (first of each action; frames cut to 4):")
    seen = set()
    for e in all_tr:
        a = e.get("action")
        if a in seen:
            continue
        seen.add(a)
        ex = {k: (v[:4] if k == "frames" else v) for k, v in e.items()}
        L.append(f"  {_short(ex, 900)}")
        L.append(f"    (types: {{{', '.join(f'{k}: {type(v).__name__}' for k, v in e.items())}}}; "
                 f"len(frames)={len(e.get('frames', []))})")
    side = next((e for e in all_tr if e.get("stream") not in (0, None)), None)
    if side is not None:
        ex = {k: (v[:3] if k == "frames" else v) for k, v in side.items()}
        L.append(f"example entry on a non-default stream: {_short(ex, 700)}")
    odd = [e for e in all_tr if e.get("action") == "alloc" and e.get("size", 0) % 512]
    L.append(f"alloc entries whose size is not a multiple of 512 (trace size = requested bytes; the "
             f"allocator's block is rounded up): {len(odd)}" + (f", e.g. size {odd[0]['size']}" if odd else ""))
    depth = collections.Counter(len(e.get("frames", [])) for e in all_tr)
    L.append(f"frames per trace entry (depth: count): {dict(sorted(depth.items()))}")
    if all_tr:
        t0, t1 = all_tr[0].get("time_us"), all_tr[-1].get("time_us")
        L.append(f"time_us first={t0} last={t1} (span {None if t0 is None else (t1 - t0) / 1e6} s)")
        ordered = all(all_tr[i].get("time_us", 0) <= all_tr[i + 1].get("time_us", 0)
                      for i in range(len(all_tr) - 1))
        L.append(f"trace time_us non-decreasing: {ordered}")
    frames = [f for e in all_tr for f in e.get("frames", [])]
    fkeys = collections.Counter(tuple(sorted(f.keys())) for f in frames)
    L.append(f"frame key sets (count): {dict(fkeys)}")
    if frames:
        L.append(f"example frame: {_short(frames[0], 300)}")
        nofr = sum(1 for e in all_tr if not e.get("frames"))
        L.append(f"trace entries with empty frames: {nofr} of {len(all_tr)}")
    # object sharing: are identical frames shared objects after unpickling?
    if frames:
        L.append(f"frame dicts: {len(frames)} references, {len({id(f) for f in frames})} distinct "
                 f"objects after pickle.load")
    if segs:
        sk = collections.Counter(tuple(sorted(s.keys())) for s in segs)
        L.append(f"segment key sets: {[list(k) for k in sk]}")
        s0 = dict(segs[0])
        s0["blocks"] = f"<{len(segs[0].get('blocks', []))} blocks>"
        if "frames" in s0:
            s0["frames"] = s0["frames"][:3]
        L.append(f"example segment: {_short(s0, 900)}")
        L.append(f"segment_type values: {dict(collections.Counter(s.get('segment_type') for s in segs))}")
        L.append(f"segment streams: {dict(collections.Counter(s.get('stream') for s in segs))}")
        blocks = [b for s in segs for b in s.get("blocks", [])]
        bk = collections.Counter(tuple(sorted(b.keys())) for b in blocks)
        L.append(f"block key sets: {[list(k) for k in bk]}")
        L.append(f"block states: {dict(collections.Counter(b.get('state') for b in blocks))}")
        for st in ("active_allocated", "inactive"):
            for b in blocks:
                if b.get("state") == st:
                    ex = {k: (v[:3] if k == "frames" else v) for k, v in b.items()}
                    L.append(f"example block ({st}): {_short(ex, 700)}")
                    break
        tot = sum(s.get("total_size", 0) for s in segs)
        alloc = sum(s.get("allocated_size", 0) for s in segs)
        L.append(f"sum(segment.total_size)={tot:,d}  sum(segment.allocated_size)={alloc:,d}")
    if ann:
        L.append(f"external_annotations entry key sets: "
                 f"{[list(k) for k in collections.Counter(tuple(sorted(a.keys())) for a in ann)]}")
        for a in ann[:6]:
            L.append(f"  {_short(a, 300)}")
        names = collections.Counter((a.get("name"), a.get("stage")) for a in ann)
        L.append(f"annotation (name, stage) counts: {dict(names)}")
    return L


def load_gz(path: str) -> dict:
    with gzip.open(path, "rb") as f:
        return pickle.load(f)


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------


def run_scenario(name: str, out_dir: str | None, dry: bool, live: str | None = None, plain: str | None = None):
    run = Run(name, out_dir, dry, live, plain)
    globals()["scenario_" + name](run)


TRUTH_NOTES = """\
Truth files (<name>.truth.json): `steps` has one entry per step end (allocated, reserved: the
allocator's counters; scenario fields; held_bytes: leak name -> bytes its holder holds, where the
scenario watches it). `expected`: verdict, leak_bytes_per_step (the sum over leaking sites, per
`unit`), leak_site (file, function, line of the largest leak's allocating line), leak_stream
("default" or "side"), owner (starts: the owner path's possible beginnings; through: a hop it
passes through). Issue 20's scenarios add: kind ("survivors": each step's leaked blocks stay
alive; "replacement": the holder frees its buffer and allocates a bigger one, so no block of a step
outlives the next), unit ("optimizer step", "eval batch", "turn": what one entry of `steps` is, as
a user counts it), step_boundary where a step is not an optimizer step, and leak_components (one
per leaking site: name, what, bytes, site, stream, owner, kind; bytes_each_step where the growth
varies from step to step, bytes then its mean); the top-level site, stream, owner and kind are the
largest component's."""


def drive_all(out_dir: str, dry: bool, tar_path: str | None, only: list[str] | None = None):
    failures = []
    for name in only or SCENARIOS:
        cmd = [sys.executable, os.path.abspath(__file__), "--scenario", name]  # its ENVIRONMENT is set there
        cmd += ["--dry-cpu"] if dry else ["--out", out_dir]
        print(f"=== {name}: {' '.join(cmd)}", flush=True)
        t0 = time.time()
        rc = subprocess.call(cmd, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        print(f"=== {name}: rc={rc} in {time.time() - t0:.1f}s", flush=True)
        if rc != 0:
            failures.append(name)
    if dry:
        return 1 if failures else 0
    notes = ["vramscope: schema of torch.cuda.memory._dump_snapshot pickles, as recorded by "
             "tests/data/record_fixtures.py",
             "(raw printout of describe_snapshot(); recorder: _record_memory_history(enabled='all', "
             "context='all', stacks='python', max_entries=1_000_000))", "", TRUTH_NOTES, ""]
    import torch  # only for the version line

    notes.append(f"torch {torch.__version__}, python {sys.version.split()[0]}, device "
                 f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-'}")
    for name in SCENARIOS:
        path = os.path.join(out_dir, f"{name}.pickle.gz")
        if not os.path.exists(path):
            continue
        snap = load_gz(path)
        full = name == "leak_offload_stream"
        lines = describe_snapshot(snap, full=full)
        hdr = f"----- {name} ({os.path.getsize(path):,d} B gz)" + (" [full schema]" if full else "")
        print(hdr)
        print("\n".join(lines), flush=True)
        notes.append("")
        notes.append(hdr)
        notes.extend(lines)
    with open(os.path.join(out_dir, "SCHEMA_NOTES.txt"), "w") as f:
        f.write("\n".join(notes) + "\n")
    if tar_path:
        with tarfile.open(tar_path, "w") as tf:
            for fn in sorted(os.listdir(out_dir)):
                if fn.endswith((".pickle.gz", ".truth.json", ".txt")):
                    tf.add(os.path.join(out_dir, fn), arcname=fn)
        print(f"tar: {tar_path} ({os.path.getsize(tar_path):,d} B)")
    if failures:
        print("FAILED scenarios:", failures)
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--all", action="store_true")
    g.add_argument("--scenario", choices=SCENARIOS)
    g.add_argument("--describe", metavar="PICKLE_GZ")
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--tar", default=None)
    ap.add_argument("--dry-cpu", action="store_true")
    ap.add_argument("--only", metavar="NAMES", help="with --all: these scenarios only (comma-separated)")
    ap.add_argument("--live", metavar="OUT_VSCOPE", help="capture with vramscope.track() instead of torch's recorder")
    ap.add_argument("--plain", metavar="TRUTH_JSON", help="record nothing (run under `vramscope run`); truth to this file")
    g.add_argument("--relativize", nargs="+", metavar=("CHECKOUT", "PICKLE_GZ"),
                    help="rewrite recorded fixtures so frames under CHECKOUT are named relative to it")
    a = ap.parse_args()
    if a.scenario:
        os.environ.update(ENVIRONMENT.get(a.scenario, {}))
    if a.relativize:
        checkout = a.relativize[0].rstrip(os.sep) + os.sep
        for path in a.relativize[1:]:
            relativize_fixture(path, checkout)
        return 0
    if a.describe:
        print("\n".join(describe_snapshot(load_gz(a.describe))))
        return 0
    if a.all:
        only = [n for n in (a.only or "").split(",") if n]
        unknown = [n for n in only if n not in SCENARIOS]
        if unknown:
            ap.error(f"--only: unknown scenarios {unknown}")
        return drive_all(a.out, a.dry_cpu, a.tar, only)
    run_scenario(a.scenario, a.out, a.dry_cpu, a.live, a.plain)
    return 0


if __name__ == "__main__":
    sys.exit(main())
