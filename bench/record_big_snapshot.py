#!/usr/bin/env python3
"""Record a big (>= 1,000,000 trace entries) real torch CUDA memory snapshot for benchmarks.

Model: 24 x nn.TransformerEncoderLayer(128, 4, 512, batch_first=True, dropout=0.0),
input randn(2, 64, 128) on CUDA, AdamW. One step = forward, out.pow(2).mean(), backward,
opt.step(), opt.zero_grad(set_to_none=True).

Recorder: torch.cuda.memory._record_memory_history(enabled="all", context="all",
stacks="python", max_entries=--max-entries), started before the model is put on the GPU.

The 5 M-entry snapshot (about 1,050 steps; on an H100, well under 10 minutes):
    python3 bench/record_big_snapshot.py --min-events 5000000 --max-entries 6000000 --gz-level 6

1. A short calibration recording measures trace entries per step.
2. The real recording runs max(--min-steps, enough for --min-events * 1.05) steps, dumps the
   plain pickle (torch.cuda.memory._dump_snapshot), times pickle.load of it, gzips it.

Writes <out>/big_snapshot.pickle.gz and <out>/big_snapshot.truth.json (default <out>: bench/out).
"""

from __future__ import annotations

import argparse
import collections
import gc
import gzip
import json
import math
import os
import pickle
import subprocess
import sys
import time

import torch
import torch.nn as nn

MAX_ENTRIES = 3_000_000


def build():
    torch.manual_seed(0)
    model = nn.Sequential(*[
        nn.TransformerEncoderLayer(128, 4, 512, batch_first=True, dropout=0.0) for _ in range(24)
    ]).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(2, 64, 128, device="cuda")
    return model, opt, x


def step(model, opt, x):
    out = model(x)
    loss = out.pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def start_recording():
    torch.cuda.memory._record_memory_history(
        enabled="all", context="all", stacks="python", max_entries=MAX_ENTRIES, clear_history=True
    )


def stop_recording():
    torch.cuda.memory._record_memory_history(enabled=None, clear_history=True)


def calibrate(n_warm=2, n_meas=5):
    start_recording()
    model, opt, x = build()
    for _ in range(n_warm):
        step(model, opt, x)
    torch.cuda.synchronize()
    n0 = len(torch.cuda.memory._snapshot()["device_traces"][0])
    for _ in range(n_meas):
        step(model, opt, x)
    torch.cuda.synchronize()
    n1 = len(torch.cuda.memory._snapshot()["device_traces"][0])
    stop_recording()
    per_step = (n1 - n0) / n_meas
    print(f"calibration: {n0} entries after {n_warm} steps (incl. model build), "
          f"{per_step:.1f} entries/step in steady state", flush=True)
    return n0, per_step


def record(steps, plain_path):
    assert torch.cuda.memory_allocated() == 0, torch.cuda.memory_allocated()  # fresh process
    start_recording()
    t0 = time.time()
    model, opt, x = build()
    truth_steps = []
    for i in range(steps):
        step(model, opt, x)
        torch.cuda.synchronize()
        truth_steps.append({"step": i, "allocated": torch.cuda.memory_allocated(),
                            "reserved": torch.cuda.memory_reserved(),
                            "time_us": int(time.time() * 1e6)})
        if i % 50 == 0 or i == steps - 1:
            print(f"  step {i:4d} allocated={truth_steps[-1]['allocated']:,d} "
                  f"reserved={truth_steps[-1]['reserved']:,d}", flush=True)
    t_train = time.time() - t0
    t0 = time.time()
    torch.cuda.memory._dump_snapshot(plain_path)
    t_dump = time.time() - t0
    stop_recording()
    del model, opt, x
    gc.collect()
    torch.cuda.empty_cache()
    print(f"recorded {steps} steps in {t_train:.1f}s; _dump_snapshot took {t_dump:.1f}s; "
          f"plain pickle {os.path.getsize(plain_path):,d} B", flush=True)
    return truth_steps, t_train, t_dump


def load_and_gzip(plain_path, gz_path, level=9):
    t0 = time.perf_counter()
    with open(plain_path, "rb") as f:
        snap = pickle.load(f)
    t_load = time.perf_counter() - t0
    # a second timing, file bytes already in page cache and read first
    with open(plain_path, "rb") as f:
        raw = f.read()
    t0 = time.perf_counter()
    pickle.loads(raw)
    t_loads = time.perf_counter() - t0
    t0 = time.perf_counter()
    gz = gzip.compress(raw, compresslevel=level, mtime=0)
    t_gz = time.perf_counter() - t0
    with open(gz_path, "wb") as f:
        f.write(gz)
    events = [len(t) for t in snap["device_traces"]]
    acts = collections.Counter(e["action"] for t in snap["device_traces"] for e in t)
    info = {
        "trace_entries_per_device": events,
        "trace_entries_total": sum(events),
        "actions": dict(acts),
        "segments": len(snap["segments"]),
        "external_annotations": len(snap.get("external_annotations", []) or []),
        "top_level_keys": sorted(snap.keys()),
        "plain_pickle_bytes": len(raw),
        "gz_bytes": len(gz),
        "pickle_load_s": round(t_load, 3),
        "pickle_loads_from_memory_s": round(t_loads, 3),
        "gzip_compress_s": round(t_gz, 3),
    }
    del snap, raw, gz
    gc.collect()
    print("snapshot: " + json.dumps(info), flush=True)
    return info


def sub(args, tag):
    """Run this script in a fresh process (so each recording starts on an untouched GPU)."""
    cmd = [sys.executable, os.path.abspath(__file__)] + args
    print(f"--- {tag}: {' '.join(cmd)}", flush=True)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=dict(os.environ, PYTHONUNBUFFERED="1"))
    result = None
    for line in p.stdout:
        line = line.rstrip("\n")
        print("    " + line, flush=True)
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    p.wait()
    if p.returncode != 0 or result is None:
        raise SystemExit(f"{tag} failed (rc={p.returncode})")
    return result


def main():
    global MAX_ENTRIES
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out"))
    ap.add_argument("--tmp", default="/tmp/vramscope_big")
    ap.add_argument("--min-steps", type=int, default=200)
    ap.add_argument("--min-events", type=int, default=1_000_000)
    ap.add_argument("--max-entries", type=int, default=MAX_ENTRIES, help="the recorder's ring buffer")
    ap.add_argument("--gz-level", type=int, default=9)
    ap.add_argument("--calibrate", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--record", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    MAX_ENTRIES = a.max_entries
    passed = ["--tmp", a.tmp, "--out", a.out, "--max-entries", str(a.max_entries), "--gz-level", str(a.gz_level)]
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.tmp, exist_ok=True)
    plain = os.path.join(a.tmp, "big_snapshot.pickle")
    gz_path = os.path.join(a.out, "big_snapshot.pickle.gz")

    if a.calibrate:
        torch.cuda.init()
        n0, per_step = calibrate()
        print("RESULT " + json.dumps({"n0": n0, "per_step": per_step}))
        return 0
    if a.record:
        torch.cuda.init()
        truth_steps, t_train, t_dump = record(a.record, plain)
        info = load_and_gzip(plain, gz_path, a.gz_level)
        os.remove(plain)
        with open(os.path.join(a.tmp, "steps.json"), "w") as f:
            json.dump(truth_steps, f)
        print("RESULT " + json.dumps({"info": info, "t_train": t_train, "t_dump": t_dump}))
        return 0

    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}", flush=True)
    cal = sub(["--calibrate"] + passed, "calibrate")
    n0, per_step = cal["n0"], cal["per_step"]
    need = math.ceil((a.min_events * 1.05 - n0) / per_step) + 2
    steps = max(a.min_steps, need)
    print(f"plan: {steps} steps (>= {a.min_steps}; {need} needed for {a.min_events * 1.05:,.0f} entries)",
          flush=True)
    rec = sub(["--record", str(steps)] + passed, f"record {steps}")
    info = rec["info"]
    with open(os.path.join(a.tmp, "steps.json")) as f:
        truth_steps = json.load(f)

    allocs = [s["allocated"] for s in truth_steps]
    truth = {
        "scenario": "big_transformer_adamw",
        "description": "24 x nn.TransformerEncoderLayer(128, 4, 512, batch_first=True, dropout=0.0), "
                       "input randn(2, 64, 128), AdamW; step = forward, out.pow(2).mean(), backward, "
                       "opt.step(), opt.zero_grad(set_to_none=True). Clean (no leak). Recorded in a "
                       "fresh process, recording started before the model was moved to the GPU.",
        "steps": truth_steps,
        "expected": {"verdict": "no-leak", "leak_bytes_per_step": 0, "leak_site": None,
                     "leak_stream": None},
        "n_steps": steps,
        "calibration": {"entries_after_2_steps": n0, "entries_per_step": per_step},
        "allocated_min_max_after_step1": [min(allocs[1:]), max(allocs[1:])] if len(allocs) > 1 else None,
        "timing_s": {"train_with_recording": round(rec["t_train"], 2), "dump_snapshot": round(rec["t_dump"], 2)},
        "snapshot": info,
        "torch_version": torch.__version__,
        "device_name": torch.cuda.get_device_name(0),
        "device_total_memory": torch.cuda.get_device_properties(0).total_memory,
        "recorder": {"enabled": "all", "context": "all", "stacks": "python", "max_entries": MAX_ENTRIES},
        "gz_level": a.gz_level,
    }
    with open(os.path.join(a.out, "big_snapshot.truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
        f.write("\n")
    print("BIG SUMMARY: " + json.dumps({k: v for k, v in truth.items() if k != "steps"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
