#!/usr/bin/env python3
"""Record vramscope live-capture fixtures of memory outside torch's caching allocator.

Each scenario is a small loop run under vramscope.track() (driver capture and NVML on, as they are
by default), one fresh process each, steps ended by vramscope.step(). It writes into <out>:
<name>.vscope (the trace), <name>.vscope.owners.json (who held each leak, found while the run's
objects lived) and <name>.truth.json: per step end, NVML's figure for this process, torch's
counters and the library's own counter; and what the scenario leaks (verdict, rate, memory,
library, site, owner). tests/python/test_device_fixtures.py checks the analysis against them.

Usage:
    python record_device_fixtures.py --all [--only A,B] [--out DIR]   # every scenario, each in a
        fresh process started from the checkout with this file's path relative to it, so the
        trace names the script tests/data/record_device_fixtures.py (no machine's path);
        pg_* under torchrun --nproc-per-node=1
    python record_device_fixtures.py --scenario NAME [--out DIR]       # one, in this process

Needs a CUDA GPU, pynvml, and for their scenarios CuPy, JAX (with its CUDA plugin), NCCL and a C++
compiler with ninja (the extension is built with torch.utils.cpp_extension.load_inline). Every
trace stays well under 1 MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

SCENARIOS = [
    "ext_cudamalloc_leak",
    "ctypes_cudamalloc",
    "cupy_kept",
    "jax_beside_torch",
    "pinned_kept",
    "clean_all",
    "pg_per_step",
    "pg_once",
]
# Scenarios that need a process group: one rank under torchrun, as a job would start.
UNDER_TORCHRUN = {"pg_per_step", "pg_once"}
# Environment set before the scenario's process starts. JAX: no preallocated pool and the platform
# allocator, so each buffer is a driver allocation of its own.
ENVIRONMENT = {"jax_beside_torch": {"XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                                    "XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}}

STEPS = 36
MiB = 1 << 20
# The recorder reads NVML at most once per device every 20 ms, before a step marker: a step at
# least this long gets its own reading, which the truth's reading at the same step end matches.
NVML_INTERVAL = 0.025
HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.relpath(os.path.abspath(__file__), CHECKOUT)  # tests/data/record_device_fixtures.py


def marker_line(marker: str, script: str = __file__) -> int:
    """Line number of the (single) source line of `script` carrying `# MARK: <marker>`."""
    tag = "# MARK: " + marker
    with open(os.path.abspath(script), encoding="utf-8") as f:
        hits = [i for i, line in enumerate(f, 1) if line.rstrip().endswith(tag)]
    if len(hits) != 1:
        raise RuntimeError(f"marker {marker!r} found {len(hits)} times")
    return hits[0]


def slope(ys: list[float]) -> float:
    """Least-squares slope per step."""
    n = len(ys)
    xm, ym = (n - 1) / 2, sum(ys) / n
    return sum((x - xm) * (y - ym) for x, y in enumerate(ys)) / sum((x - xm) ** 2 for x in range(n))


def leak_expected(memory: str, library: str, counter: str, functions_markers: list[tuple[str, str]],
                  owner: dict) -> dict:
    """A leak's truth: its memory and library, the field of `steps` that is the library's own counter
    (its slope from step 1 is the rate), the lines it may be allocated at (function, marker), and
    who holds it: {"starts": [...]} (an owner path's beginnings) or {"note": ...} (no object)."""
    return {"memory": memory, "library": library, "counter": counter, "owner": owner,
            "sites": [{"file": SCRIPT, "function": f, "line": marker_line(m)} for f, m in functions_markers]}


# --------------------------------------------------------------------------
# Recording harness
# --------------------------------------------------------------------------


class Nvml:
    """This process's memory on device 0 as NVML sees it: its own entry in the running compute
    processes; in a container, whose pids NVML does not know, the one process listed; else the
    device's used memory."""

    def __init__(self, torch):
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        try:  # the CUDA ordinal is not NVML's index under CUDA_VISIBLE_DEVICES: the UUID is the same
            self.handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{torch.cuda.get_device_properties(0).uuid}")
        except Exception:
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)

    def used(self) -> tuple[int, str]:
        processes = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        mine = [p.usedGpuMemory for p in processes if p.pid == os.getpid()]
        if mine:
            return mine[0], "process"
        if len(processes) == 1:
            return processes[0].usedGpuMemory, "the one process listed"
        return self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used, "device used"


class Run:
    """The capture, the truth at every step end, and the files of one scenario."""

    def __init__(self, name: str, out_dir: str):
        import torch

        self.torch = torch
        self.name = name
        self.out_dir = out_dir
        self.steps: list[dict] = []
        self.counters: dict = {}  # name -> a function giving the library's own counter now
        torch.manual_seed(1234)
        torch.cuda.init()
        self.nvml = Nvml(torch)

    def start(self, **counters):
        """Starts the capture; `counters`: each a function read at every step end into `steps`."""
        import vramscope

        self.counters = counters
        os.makedirs(self.out_dir, exist_ok=True)
        self.capture = vramscope.track(os.path.join(self.out_dir, f"{self.name}.vscope"), summary=False).start()

    def record_step(self, i: int):
        """Ends step i (vramscope.step(): the recorder reads NVML just before the marker) and reads the
        truth at the same step end."""
        import vramscope

        torch = self.torch
        torch.cuda.synchronize()
        time.sleep(NVML_INTERVAL)
        vramscope.step()
        nvml_used, source = self.nvml.used()
        entry = {"step": i, "nvml_used": nvml_used, "nvml_source": source,
                 "allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
                 "host_pinned": host_pinned_bytes(torch), "time_us": int(time.time() * 1e6)}
        entry.update({name: read() for name, read in self.counters.items()})
        self.steps.append(entry)
        print(f"  [{self.name}] step {i:2d} " + " ".join(f"{k}={v}" for k, v in entry.items() if k not in
                                                         ("step", "time_us")), flush=True)

    def finish(self, description: str, verdict: str, leak: dict | None):
        """Stops the capture inside the scenario (its locals still live: the owners are found at the
        end), names the files after the scenario and writes the truth."""
        self.capture.stop()
        trace = os.path.join(self.out_dir, f"{self.name}.vscope")
        if self.capture.path != trace:  # under torchrun: NAME.rank0.vscope
            os.replace(self.capture.path, trace)
            if os.path.exists(self.capture.path + ".owners.json"):
                os.replace(self.capture.path + ".owners.json", trace + ".owners.json")
        if leak is not None:
            counter = [s[leak["counter"]] for s in self.steps]
            leak["bytes_per_step"] = slope(counter[1:])  # the first step holds the library's set-up too
        torch = self.torch
        truth = {"scenario": self.name, "description": description, "steps": self.steps,
                 "expected": {"verdict": verdict, "leak": leak},
                 "torch_version": torch.__version__, "device_name": torch.cuda.get_device_name(0),
                 "device_total_memory": torch.cuda.get_device_properties(0).total_memory,
                 "trace_bytes": os.path.getsize(trace)}
        with open(os.path.join(self.out_dir, f"{self.name}.truth.json"), "w") as f:
            json.dump(truth, f, indent=1)
            f.write("\n")
        print(f"TRUTH {self.name}: " + json.dumps({k: v for k, v in truth.items() if k != "steps"}), flush=True)
        print(f"  wrote {trace} ({os.path.getsize(trace):,d} B)", flush=True)


def host_pinned_bytes(torch) -> int | None:
    """Pinned host memory torch's host allocator holds (cached blocks too), where this torch says."""
    stats = getattr(torch.cuda, "host_memory_stats", None)
    try:
        return stats().get("allocated_bytes.current") if stats is not None else None
    except Exception:
        return None


class TinyTrainer:
    """torch training beside the library under test: a small MLP, a manual SGD update (no optimizer,
    whose steps would end a capture's step before the first vramscope.step() does)."""

    def __init__(self, torch):
        self.torch = torch
        self.model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)).cuda()

    def step(self):
        torch = self.torch
        x = torch.randn(64, 256, device="cuda")
        self.model(x).pow(2).mean().backward()
        with torch.no_grad():
            for p in self.model.parameters():
                p -= 1e-3 * p.grad
                p.grad = None


# --------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------

# An extension that takes device memory from the driver itself and keeps it: cuMemAlloc_v2 found
# with dlsym in libcuda, so it builds without CUDA headers or toolkit, on the context torch made current.
LEAKY_EXT = r"""
#include <dlfcn.h>
#include <cstdint>
#include <vector>

using MemAlloc = int (*)(uint64_t*, size_t);
static std::vector<uint64_t> kept;
static int64_t kept_bytes = 0;

int64_t hold(int64_t bytes) {
    static const auto alloc = reinterpret_cast<MemAlloc>(dlsym(dlopen("libcuda.so.1", RTLD_NOW), "cuMemAlloc_v2"));
    uint64_t ptr = 0;
    if (alloc == nullptr || alloc(&ptr, size_t(bytes)) != 0) return -1;
    kept.push_back(ptr);
    kept_bytes += bytes;
    return kept_bytes;
}

int64_t held_bytes() { return kept_bytes; }
"""


def scenario_ext_cudamalloc_leak(run: Run):
    from torch.utils.cpp_extension import load_inline

    ext = load_inline("leaky_ext", LEAKY_EXT, functions=["hold", "held_bytes"], extra_ldflags=["-ldl"])
    trainer = TinyTrainer(run.torch)
    run.start(ext_held=ext.held_bytes)
    for i in range(STEPS):
        trainer.step()
        if ext.hold(2 * MiB) < 0:  # MARK: ext_hold
            raise RuntimeError("cuMemAlloc_v2 failed")
        run.record_step(i)
    run.finish("An extension built with load_inline takes 2 MiB from the CUDA driver (cuMemAlloc_v2) every step "
               "and keeps it; a small MLP trains beside it. Counter: the bytes the extension holds.", "leak",
               leak_expected("external", "leaky_ext.so", "ext_held", [("scenario_ext_cudamalloc_leak", "ext_hold")],
                             {"note": "held by leaky_ext.so's own allocations: no Python object maps to them"}))


def scenario_ctypes_cudamalloc(run: Run):
    import ctypes
    import ctypes.util
    import glob

    import torch

    wheels = os.path.join(os.path.dirname(torch.__file__), "..", "nvidia")
    found = sorted(glob.glob(os.path.join(wheels, "*", "lib", "libcudart.so*")) + glob.glob(os.path.join(wheels, "cuda_runtime", "lib", "libcudart.so*")))
    cudart = ctypes.CDLL(found[0] if found else ctypes.util.find_library("cudart"))
    trainer = TinyTrainer(torch)
    kept = []
    run.start(ctypes_held=lambda: len(kept) * 2 * MiB)
    for i in range(STEPS):
        trainer.step()
        pointer = ctypes.c_void_p()
        if cudart.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(2 * MiB)) != 0:  # MARK: ctypes_malloc
            raise RuntimeError("cudaMalloc failed")
        kept.append(pointer)
        run.record_step(i)
    run.finish("cudaMalloc called through ctypes, 2 MiB a step kept; a small MLP trains beside it. Counter: the bytes "
               "taken.", "leak",
               leak_expected("external", "CUDA runtime", "ctypes_held", [("scenario_ctypes_cudamalloc", "ctypes_malloc")],
                             {"note": "held by CUDA runtime's own allocations: no Python object maps to them"}))


def scenario_cupy_kept(run: Run):
    import cupy

    pool = cupy.get_default_memory_pool()  # the default pool, as users have it: it caches
    trainer = TinyTrainer(run.torch)
    kept = []
    run.start(cupy_used=pool.used_bytes, cupy_total=pool.total_bytes)
    for i in range(STEPS):
        trainer.step()
        kept.append(cupy.ones(3 * MiB // 2 // 4, dtype=cupy.float32))  # MARK: cupy_kept
        run.record_step(i)
    run.finish("A list keeps a new 1.5 MiB CuPy array every step (CuPy's default memory pool); a small MLP "
               "trains beside it. Counters: the pool's used_bytes and total_bytes; the leak is the pool's growth.",
               "leak", leak_expected("external", "CuPy", "cupy_total", [("scenario_cupy_kept", "cupy_kept")],
                                     {"starts": ["scenario_cupy_kept() local 'kept'["]}))


def scenario_jax_beside_torch(run: Run):
    import jax
    import jax.numpy as jnp

    device = jax.devices("gpu")[0]

    def jax_bytes() -> int:
        """XLA's own count where its allocator keeps one (not the platform allocator); else the bytes
        of every live array."""
        stats = device.memory_stats() or {}
        return stats.get("bytes_in_use") or sum(a.nbytes for a in jax.live_arrays())

    trainer = TinyTrainer(run.torch)
    kept = []
    run.start(jax_bytes=jax_bytes)
    for i in range(STEPS):
        trainer.step()
        kept.append(jnp.full((2 * MiB // 4,), float(i), dtype=jnp.float32))  # MARK: jax_kept
        kept[-1].block_until_ready()
        run.record_step(i)
    run.finish("JAX (no preallocation, platform allocator: one driver allocation per buffer) makes a 2 MiB array "
               "every step and a list keeps it, while torch trains a small MLP in the same process. Counter: "
               "JAX's bytes in use (memory_stats, else its live arrays).", "leak",
               leak_expected("external", "JAX/XLA", "jax_bytes", [("scenario_jax_beside_torch", "jax_kept")],
                             {"starts": ["scenario_jax_beside_torch() local 'kept'["]}))


def scenario_pinned_kept(run: Run):
    torch = run.torch
    trainer = TinyTrainer(torch)
    kept = []
    run.start(pinned_kept=lambda: sum(t.untyped_storage().nbytes() for t in kept))
    for i in range(STEPS):
        trainer.step()
        kept.append(torch.empty(MiB, dtype=torch.float32, pin_memory=True))  # MARK: pinned_kept
        run.record_step(i)
    run.finish("A list keeps a new 4 MiB pinned host tensor (torch's host allocator) every step; a small MLP "
               "trains beside it. Counter: the kept tensors' bytes (host_pinned: torch's host allocator).",
               "leak", leak_expected("pinned", "torch", "pinned_kept", [("scenario_pinned_kept", "pinned_kept")],
                                     {"starts": ["scenario_pinned_kept() local 'kept'["]}))


def scenario_clean_all(run: Run):
    import cupy

    torch = run.torch
    pool = cupy.get_default_memory_pool()
    trainer = TinyTrainer(torch)
    on_device = torch.empty(MiB, device="cuda")
    run.start(cupy_used=pool.used_bytes, cupy_total=pool.total_bytes)
    for i in range(STEPS):
        trainer.step()
        scratch = cupy.ones(3 * MiB // 2 // 4, dtype=cupy.float32)  # back to the pool at the end of the step
        float(scratch.sum())
        staged = torch.empty(MiB, dtype=torch.float32, pin_memory=True)  # back to the host allocator's cache
        on_device.copy_(staged, non_blocking=True)
        del scratch, staged
        run.record_step(i)
    run.finish("Torch trains a small MLP; every step a 1.5 MiB CuPy array and a 4 MiB pinned staging tensor "
               "(copied to the device) are made and dropped, so CuPy's pool and torch's host allocator reuse "
               "their blocks. No leak; the usage ledger accounts for NVML's figure.", "no-leak", None)


def _process_group_up(torch):
    import torch.distributed as dist

    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl")  # the torchrun's env://
    return dist


def scenario_pg_per_step(run: Run):
    torch = run.torch
    dist = _process_group_up(torch)
    registry = dist.distributed_c10d._world.pg_map
    trainer = TinyTrainer(torch)
    run.start(groups=lambda: len(registry), outside_torch=lambda: run.nvml.used()[0] - torch.cuda.memory_reserved())
    t = torch.ones(1024, device="cuda")
    for i in range(STEPS):
        trainer.step()
        group = dist.new_group([0])  # MARK: pg_new_group
        dist.all_reduce(t, group=group)  # MARK: pg_all_reduce
        run.record_step(i)
    run.finish("Under torchrun (one rank, NCCL), a new process group every step, an all_reduce on it, never "
               "destroyed: each group's communicator keeps its buffers. Counters: the groups in torch.distributed's "
               "registry, and NVML's figure less torch's reserved memory (the rate).", "leak",
               leak_expected("external", "NCCL", "outside_torch",
                             [("scenario_pg_per_step", "pg_new_group"), ("scenario_pg_per_step", "pg_all_reduce")],
                             {"starts": ["torch.distributed.distributed_c10d._pg_map <dict key>"]}))
    dist.destroy_process_group()


def scenario_pg_once(run: Run):
    torch = run.torch
    dist = _process_group_up(torch)
    trainer = TinyTrainer(torch)
    group = dist.new_group([0])
    t = torch.ones(1024, device="cuda")
    run.start(outside_torch=lambda: run.nvml.used()[0] - torch.cuda.memory_reserved())
    for i in range(STEPS):
        trainer.step()
        dist.all_reduce(t, group=group)
        run.record_step(i)
    run.finish("Under torchrun (one rank, NCCL), one process group made once, an all_reduce on it every step. "
               "No leak: the communicator is made at the first step and kept.", "no-leak", None)
    dist.destroy_process_group()


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------

# Runs this file by its checkout-relative path, so the code's frames carry that name.
BOOT = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


def scenario_command(name: str, out_dir: str) -> list[str]:
    here = [sys.executable, "-c", BOOT, SCRIPT, "--scenario", name, "--out", os.path.abspath(out_dir)]
    if name in UNDER_TORCHRUN:
        return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=1", "--no-python", *here]
    return here


def drive_all(out_dir: str, only: list[str]) -> int:
    failures = []
    for name in only or SCENARIOS:
        cmd = scenario_command(name, out_dir)
        print(f"=== {name}: {' '.join(cmd)}", flush=True)
        t0 = time.time()
        env = dict(os.environ, PYTHONUNBUFFERED="1", **ENVIRONMENT.get(name, {}))
        rc = subprocess.call(cmd, cwd=CHECKOUT, env=env)
        print(f"=== {name}: rc={rc} in {time.time() - t0:.1f}s", flush=True)
        if rc != 0:
            failures.append(name)
    if failures:
        print("FAILED scenarios:", failures)
        return 1
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--all", action="store_true", help="every scenario, each in a fresh process")
    g.add_argument("--scenario", choices=SCENARIOS, help="one scenario, in this process")
    ap.add_argument("--out", default=os.path.join(HERE, "device"),
                    help="where the files go (default: tests/data/device)")
    ap.add_argument("--only", metavar="NAMES", help="with --all: these scenarios only (comma-separated)")
    a = ap.parse_args()
    if a.all:
        only = [n for n in (a.only or "").split(",") if n]
        unknown = [n for n in only if n not in SCENARIOS]
        if unknown:
            ap.error(f"--only: unknown scenarios {unknown}")
        if not shutil.which("ninja"):
            print("note: ninja is not on PATH; ext_cudamalloc_leak cannot build its extension", flush=True)
        return drive_all(a.out, only)
    os.environ.update(ENVIRONMENT.get(a.scenario, {}))
    globals()["scenario_" + a.scenario](Run(a.scenario, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
