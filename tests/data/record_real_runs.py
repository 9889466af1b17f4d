#!/usr/bin/env python3
"""Record live-capture fixtures of leaks re-created from public bug reports (issue 38), each with a
truth taken from torch's own counters or the objects that leak.

- hf_eval_gather: HF Trainer.evaluate() without eval_accumulation_steps: every batch's logits are
  concatenated into one buffer on the GPU, replaced by a bigger one each batch (transformers#7232 and
  its many duplicates);
- kv_cache_turns: a DynamicCache reused across chat turns from a module-level dict (a chat server's
  session store): each turn's keys and values are concatenated onto the last;
- exceptions_kept: a loop that keeps the exceptions it caught: each traceback keeps the frame that
  raised, and the frame its GPU local (pytorch forum "memory leak when catching OOM");
- lru_cache_masks / lru_cache_bounded: a functools.lru_cache of attention masks with a new key every
  step (unbounded: a leak) and its maxsize=4 twin (bounded: no leak);
- optimizer_rebuilt: a new Adam and StepLR every round, the old schedulers kept (each keeps its
  optimizer, and the optimizer its state): federated rounds, curricula;
- two_processes: a loop keeping 8 MiB a step while another process holds 1 GiB on the same GPU:
  NVML must still read this process's own figure;
- hf_eval_in_training: hf_eval_gather's evaluation run inside Trainer.train() every 2 optimizer
  steps: its eval batches are units inside the step, and the leak is one inside the step;
- jax_arrays_kept: JAX beside torch keeping a 16 MiB array every step, XLA's pool growing in
  doublings (XLA_PYTHON_CLIENT_PREALLOCATE=false): the driver sees the doublings, JAX's own
  bytes_in_use the leak (issue 38 item 5);
- jax_prealloc_kept: the same with JAX's default preallocation: the pool is taken once, flat, and
  only bytes_in_use shows the leak.

Each scenario runs in a fresh process started from the checkout with this file's relative path (so
frames name tests/data/record_real_runs.py), under vramscope's live capture, and writes into <out>:
<name>.vscope, <name>.vscope.owners.json (who held each leak, found while the run lived) and
<name>.truth.json: per step, torch.cuda.memory_allocated() and the scenario's own count of what it
keeps, and what the leak must be (verdict, rate, site line, library function, owner).
tests/python/test_real_runs.py checks the analysis against them, without a GPU.

Usage:
    python tests/data/record_real_runs.py --all [--only A,B] [--out DIR]
    python tests/data/record_real_runs.py --scenario NAME [--out DIR]

Needs a CUDA GPU, pynvml and transformers. Every trace stays well under 1 MiB.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import subprocess
import sys
import time

SCENARIOS = ["hf_eval_gather", "kv_cache_turns", "exceptions_kept", "lru_cache_masks", "lru_cache_bounded",
             "optimizer_rebuilt", "two_processes", "hf_eval_in_training", "jax_arrays_kept", "jax_prealloc_kept"]
MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.relpath(os.path.abspath(__file__), CHECKOUT)  # tests/data/record_real_runs.py
# Runs this file by its checkout-relative path, so the code's frames carry that name.
BOOT = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


def _sibling(name: str):
    """Another recorder beside this one, for its helpers (importing it imports no torch)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


slope = _sibling("record_device_fixtures").slope
nbytes = _sibling("record_peak_fixtures").storage_bytes


def marker_line(marker: str) -> int:
    return _sibling("record_device_fixtures").marker_line(marker, __file__)


class Truth:
    """What the scenario keeps at each step end, by its own count and by torch's, and the leak it is."""

    def __init__(self, name: str, out_dir: str):
        import torch

        self.torch, self.name, self.out_dir = torch, name, out_dir
        self.steps: list[dict] = []
        self.path = os.path.join(out_dir, f"{name}.vscope")

    def step(self, kept: int, end_step: bool = True, **more):
        import vramscope

        self.torch.cuda.synchronize()
        if end_step:
            vramscope.step()
        self.steps.append({"allocated": self.torch.cuda.memory_allocated(), "kept": kept, **more})

    def write(self, description: str, verdict: str, site_marker: str | None, library_function: str | None = None,
              owner_contains: list[str] | None = None, unit: str = "step", **more):
        torch = self.torch
        kept = [s["kept"] for s in self.steps]
        truth = {"scenario": self.name, "description": description, "steps": self.steps,
                 "expected": {"verdict": verdict, "unit": unit,
                              "bytes_per_step": slope(kept[1:]) if len(kept) > 2 else 0.0,
                              "site": {"file": SCRIPT, "line": marker_line(site_marker)} if site_marker else None,
                              "library_function": library_function, "owner_contains": owner_contains or [], **more},
                 "torch_version": torch.__version__, "device_name": torch.cuda.get_device_name(0),
                 "device_total_memory": torch.cuda.get_device_properties(0).total_memory}
        with open(os.path.join(self.out_dir, f"{self.name}.truth.json"), "w") as f:
            json.dump(truth, f, indent=1)
            f.write("\n")
        print(f"TRUTH {self.name}: " + json.dumps(truth["expected"]), flush=True)


def tiny_llama(torch, vocab=512, hidden=64, layers=2):
    import transformers

    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                                      max_position_embeddings=4096)
    return transformers.LlamaForCausalLM(config).cuda()


def capture(truth: Truth, **options):
    from vramscope.capture.session import Capture

    return Capture(truth.path, summary=False, live_warnings=False, **options)


# --------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------


def scenario_hf_eval_gather(truth: Truth):
    torch = truth.torch
    import transformers

    vocab, tokens, batch, batches = 512, 64, 4, 32
    model = tiny_llama(torch, vocab=vocab)

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return batch * batches

        def __getitem__(self, i):
            ids = torch.randint(0, vocab, (tokens,))
            return {"input_ids": ids, "labels": ids}

    args = transformers.TrainingArguments(os.path.join(truth.out_dir, "hf_eval_out"), per_device_eval_batch_size=batch,
                                          report_to=[], disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, eval_dataset=Tokens())
    trainer.compute_metrics = lambda p: {"n": float(len(p.predictions))}

    def after_forward(module, inputs, output):  # the truth per eval batch: logits kept so far
        truth.step(kept=len(truth.steps) * batch * tokens * vocab * 4 + batch * tokens * vocab * 4, end_step=False)

    model.register_forward_hook(after_forward)
    with capture(truth):
        trainer.evaluate()  # MARK: hf_evaluate
    truth.write("Trainer.evaluate() without eval_accumulation_steps", "leak", "hf_evaluate",
                library_function="torch_pad_and_concatenate", owner_contains=["evaluation_loop() local 'all_preds'"],
                unit="eval batch")


def scenario_hf_eval_in_training(truth: Truth):
    torch = truth.torch
    import transformers

    vocab, tokens, batch, batches = 512, 64, 4, 16
    model = tiny_llama(torch, vocab=vocab)

    class Tokens(torch.utils.data.Dataset):
        def __init__(self, batches: int):
            self.batches = batches

        def __len__(self):
            return batch * self.batches

        def __getitem__(self, i):
            ids = torch.randint(0, vocab, (tokens,))
            return {"input_ids": ids, "labels": ids}

    args = transformers.TrainingArguments(os.path.join(truth.out_dir, "hf_train_out"), max_steps=6,
                                          per_device_train_batch_size=batch, per_device_eval_batch_size=batch,
                                          eval_strategy="steps", eval_steps=2, save_strategy="no", report_to=[],
                                          logging_steps=1000, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(6), eval_dataset=Tokens(batches))
    trainer.compute_metrics = lambda p: {"n": float(len(p.predictions))}
    gathered = [0]

    def after_forward(module, inputs, output):  # the truth per eval batch: logits gathered so far
        if not module.training:
            gathered[0] = gathered[0] % (batches * batch * tokens * vocab * 4) + batch * tokens * vocab * 4
            truth.step(kept=gathered[0], end_step=False)

    model.register_forward_hook(after_forward)
    with capture(truth):
        trainer.train()  # MARK: hf_train
    truth.write("Trainer.train() evaluating every 2 steps without eval_accumulation_steps", "leak", "hf_train",
                library_function="torch_pad_and_concatenate", owner_contains=["evaluation_loop() local 'all_preds'"],
                unit="eval batch", within_step=True,
                bytes_per_step=slope([s["kept"] for s in truth.steps[:batches]]))  # per eval batch, one evaluation's


ACTIVATION_MEMORY: dict = {}


def cache_bytes(cache) -> int:
    """What a DynamicCache holds (a function: no local of the loop's frame keeps its tensors)."""
    if hasattr(cache, "layers"):
        return nbytes([t for layer in cache.layers for t in (layer.keys, layer.values)])
    return nbytes(list(cache.key_cache) + list(cache.value_cache))  # transformers before 4.56


def scenario_kv_cache_turns(truth: Truth):
    torch = truth.torch
    import transformers

    model = tiny_llama(torch, hidden=128, layers=4).eval()
    ACTIVATION_MEMORY["system"] = transformers.DynamicCache()
    turn_tokens, turns = 48, 30
    with capture(truth), torch.no_grad():
        for turn in range(turns):
            ids = torch.randint(0, 512, (1, turn_tokens), device="cuda")
            model(input_ids=ids, past_key_values=ACTIVATION_MEMORY["system"], use_cache=True)  # MARK: kv_turn
            truth.step(kept=cache_bytes(ACTIVATION_MEMORY["system"]))
    truth.write("a DynamicCache reused across chat turns from a module-level dict", "leak", "kv_turn",
                library_function="update", owner_contains=["ACTIVATION_MEMORY['system']"])


def fails_with_a_gpu_local(w):
    h = w @ w  # MARK: exc_local
    raise ValueError(f"bad batch: {h.shape}")


def scenario_exceptions_kept(truth: Truth):
    torch = truth.torch
    w = torch.randn(1024, 1024, device="cuda")
    failures = []
    with capture(truth):
        for step in range(30):
            try:
                fails_with_a_gpu_local(w)
            except ValueError as e:
                failures.append(e)
            truth.step(kept=len(failures) * 1024 * 1024 * 4)
    truth.write("caught exceptions kept in a list, each traceback keeping its frame's GPU local", "leak", "exc_local",
                owner_contains=["local 'failures'[", ".__traceback__", ".tb_frame", ".f_locals['h']"])


def lru_masks(truth: Truth, maxsize: int | None):
    torch = truth.torch

    @functools.lru_cache(maxsize=maxsize)
    def mask_fn(key):
        return torch.ones(1024, 1024, device="cuda").tril()  # MARK: lru_mask

    model = torch.nn.Linear(1024, 1024).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with capture(truth):
        for step in range(30):
            x = torch.randn(256, 1024, device="cuda")
            (model(x) @ mask_fn(step)).square().mean().backward()  # a new key every step
            opt.step()
            opt.zero_grad(set_to_none=True)
            info = mask_fn.cache_info()
            truth.step(kept=info.currsize * 1024 * 1024 * 4, end_step=False)
    return mask_fn


def scenario_lru_cache_masks(truth: Truth):
    mask_fn = lru_masks(truth, None)
    truth.write("an unbounded lru_cache of masks, a new key each step", "leak", "lru_mask",
                owner_contains=["<lru_cache of mask_fn>["])
    del mask_fn


def scenario_lru_cache_bounded(truth: Truth):
    lru_masks(truth, 4)
    truth.write("the same cache with maxsize=4: bounded", "no-leak", None)


def scenario_optimizer_rebuilt(truth: Truth):
    torch = truth.torch
    model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1024)).cuda()
    parameters = nbytes(list(model.parameters()))
    schedulers = []
    with capture(truth):  # steps from the optimizers, whichever steps now
        for round_ in range(20):
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # MARK: new_optimizer
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10)
            schedulers.append(sched)
            x = torch.randn(512, 1024, device="cuda")
            model(x).square().mean().backward()
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            del x
            truth.step(kept=len(schedulers) * 2 * parameters, end_step=False)
    truth.write("an Adam and a StepLR made every round, the old schedulers kept", "leak", None,
                owner_contains=["local 'schedulers'["], state_of_one_optimizer=2 * parameters)


HOLDER = """
import sys, time, torch
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("holding", flush=True)
sys.stdin.read()
"""


def scenario_two_processes(truth: Truth):
    torch = truth.torch
    other = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert other.stdout.readline().strip() == "holding"
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{torch.cuda.get_device_properties(0).uuid}")

        def mine() -> tuple[int | None, int]:
            processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            own = [p.usedGpuMemory for p in processes if p.pid == os.getpid()]
            return (own[0] if own else None), len(processes)

        kept = []
        with capture(truth):
            for step in range(30):
                kept.append(torch.empty(8 * MiB, dtype=torch.uint8, device="cuda"))  # MARK: two_kept
                time.sleep(0.03)  # a step longer than the recorder's NVML interval
                used, listed = mine()
                truth.step(kept=len(kept) * 8 * MiB, nvml_used=used, nvml_processes=listed)
        truth.write("a loop keeping 8 MiB a step while another process holds 1 GiB on the same GPU", "leak", "two_kept",
                    owner_contains=["local 'kept'["], other_pid=other.pid)
    finally:
        other.stdin.close()
        other.wait(timeout=60)


def jax_arrays_kept(truth: Truth, preallocate: bool):
    """torch trains while JAX keeps a 16 MiB array a step in a list; the truth is JAX's own count."""
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "true" if preallocate else "false"  # read when JAX starts
    torch = truth.torch
    import jax
    import jax.numpy as jnp

    model = torch.nn.Linear(1024, 1024).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    kept = []
    with capture(truth):  # steps from the optimizer; JAX starts (and preallocates) inside the capture
        for step in range(40):
            x = torch.randn(256, 1024, device="cuda")
            model(x).square().mean().backward()
            y = jnp.full((4 * MiB,), float(step), jnp.float32) + 1.0  # MARK: jax_keep
            y.block_until_ready()
            kept.append(y)
            opt.step()
            opt.zero_grad(set_to_none=True)
            stats = jax.local_devices()[0].memory_stats()
            truth.step(kept=stats["bytes_in_use"], end_step=False, arrays=len(kept) * 16 * MiB,
                       pool_bytes=stats.get("pool_bytes"), bytes_reserved=stats.get("bytes_reserved"))
    return kept


def scenario_jax_arrays_kept(truth: Truth):
    jax_arrays_kept(truth, preallocate=False)
    truth.write("JAX arrays kept beside torch, XLA's pool growing in doublings", "leak", "jax_keep",
                owner_contains=["local 'kept'["], evidence="pool-in-use")


def scenario_jax_prealloc_kept(truth: Truth):
    jax_arrays_kept(truth, preallocate=True)
    truth.write("JAX arrays kept beside torch in a pool preallocated at once", "leak", "jax_keep",
                owner_contains=["local 'kept'["], evidence="pool-in-use")


# --------------------------------------------------------------------------


def drive_all(out_dir: str, only: list[str]) -> int:
    failures = []
    for name in only or SCENARIOS:
        cmd = [sys.executable, "-c", BOOT, SCRIPT, "--scenario", name, "--out", os.path.abspath(out_dir)]
        print(f"=== {name}", flush=True)
        t0 = time.time()
        rc = subprocess.call(cmd, cwd=CHECKOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        print(f"=== {name}: rc={rc} in {time.time() - t0:.1f}s", flush=True)
        if rc:
            failures.append(name)
    if failures:
        print("FAILED scenarios:", failures)
    return 1 if failures else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--all", action="store_true", help="every scenario, each in a fresh process")
    g.add_argument("--scenario", choices=SCENARIOS, help="one scenario, in this process")
    ap.add_argument("--out", default=os.path.join(HERE, "real_runs"), help="default: tests/data/real_runs")
    ap.add_argument("--only", metavar="NAMES", help="with --all: these scenarios only (comma-separated)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.all:
        only = [n for n in (a.only or "").split(",") if n]
        if unknown := [n for n in only if n not in SCENARIOS]:
            ap.error(f"--only: unknown scenarios {unknown}")
        return drive_all(a.out, only)
    globals()["scenario_" + a.scenario](Truth(a.scenario, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
