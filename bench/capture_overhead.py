"""Capture overhead on a real training step: vramscope against no capture and torch's
own recorder, and beside the floor of a recorder (FLOOR_SINK: sinks that do the least any recorder of
these events must do).

Every variant takes one step per cycle in one process, the cycles' orders balanced so that each
variant follows every other equally often: neighbouring steps compared, every step counted. Per
variant: the ratio of medians and of 20th percentiles to no capture, and the paired ratio (each step
over its cycle's no-capture step), with 95 % intervals; over several processes, each process's own
figure too, and their mean's interval (what differs from one process to the next: placement, clocks).

  python bench/capture_overhead.py --alternate 200 20 --processes 8 --variants none vramscope
      (the capture figure: 8 fresh processes, pooled)
  python bench/capture_overhead.py --alternate 200 20 --processes 5 --variants none hook-to-null-sink \
      hook-to-floor hook-to-floor-ahead hook-to-floor-ahead-prefetch vramscope-no-stacks vramscope
      (the floor figure; --against hook-to-floor-ahead-prefetch divides by the floor instead)
  python bench/capture_overhead.py --pool a.json b.json   # several --alternate --out files as one
  python bench/capture_overhead.py --alloc-cost 200000    # ns per allocation, by state
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

VARIANTS = ["none", "torch-recorder", "vramscope"]  # the comparison users ask for


def workload(name: str):
    import torch

    torch.manual_seed(0)
    if name == "transformer":
        # The model: ~1,640 allocations a step, small kernels (CPU-bound launching).
        layers = [torch.nn.TransformerEncoderLayer(128, 4, 512, batch_first=True, dropout=0.0) for _ in range(24)]
        model = torch.nn.Sequential(*layers).cuda()
        x = torch.randn(2, 64, 128, device="cuda")
    else:  # "large-kernels": a few big matmuls a step, GPU-bound
        model = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192, bias=False) for _ in range(4)]).cuda()
        x = torch.randn(4096, 8192, device="cuda")
    opt = torch.optim.AdamW(model.parameters())

    def step():
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def deep(depth: int, fn):
    """Calls fn under `depth` Python frames: a training step's stack is about this deep."""
    return deep(depth - 1, fn) if depth else fn()


def alloc_cost(pairs: int) -> dict:
    """ns per allocate+free of a small tensor (the allocator's fast path plus dispatch), by state,
    in one process: before any hook exists, hook attached but idle, vramscope on, vramscope on
    without Python stacks, torch's recorder; and the hook forwarding to a sink that does nothing."""
    import torch
    import vramscope
    from vramscope import _core

    torch.cuda.init()

    def loop():
        t0 = time.perf_counter()
        for _ in range(pairs):
            x = torch.empty(256, device="cuda")
            del x
        return 1e9 * (time.perf_counter() - t0) / pairs

    deep(20, loop)  # warm: the first pass pays for lazy initialisation
    out = {"no hook": [deep(20, loop) for _ in range(3)]}
    capture = vramscope.track(tempfile.mktemp(suffix=".vscope"), summary=False, live_warnings=False).start()
    hook, recorder, sink, nothing = capture._hook, capture._recorder, _core.allocator_sink(), null_sink()
    states = {
        "hook idle": lambda: hook.uninstall(),
        "hook to a null sink": lambda: hook.install(nothing),
        "vramscope": lambda: (hook.install(sink), recorder.set_python_stacks(True)),
        "vramscope, no Python stacks": lambda: (hook.install(sink), recorder.set_python_stacks(False)),
        "torch recorder": lambda: (hook.uninstall(), torch.cuda.memory._record_memory_history(stacks="python")),
    }
    for _ in range(3):
        for state, enter in states.items():
            enter()
            out.setdefault(state, []).append(deep(20, loop))
            torch.cuda.memory._record_memory_history(enabled=None)
    hook.install(sink)
    capture.stop()
    return {state: statistics.median(v) for state, v in out.items()}


def null_sink() -> int:
    """The address of a C function that takes the hook's events and does nothing (compiled on first
    use): with it installed, a step pays torch's trace entry and the hook's node lookup, not vramscope's
    recorder."""
    import ctypes

    from c_library import c_library

    null_sink.lib = c_library(  # kept loaded for the process
        "null_sink", "#include <stdint.h>\nvoid null_sink(int k, int d, uint64_t a, uint64_t s, uint64_t st, const char* n) {}\n")
    return ctypes.cast(null_sink.lib.null_sink, ctypes.c_void_p).value


# The least any recorder of the hook's events must do on the allocating thread: find the thread's
# buffer (thread-local, in a loaded library, as vramscope's), read the time, store the fields as
# they come (stream handle, node pointer: naming them can wait for a reader), take a number in the
# device's order (the allocator's lock serialises a device's calls, but not its threads) and publish
# the count. "ahead": the next record's line asked for, for writing, at each store (as
# capture/chunk_queue.h does: torch releases its allocator's lock right after the hook, and that
# waits for the hook's stores; a ring line written 1,024 events ago has left the core's caches).
# "ahead-prefetch": that, and the calling thread's Python frames hashed in place, innermost first,
# at each allocation (CPython 3.11 and 3.12's frame layout, as capture/python_frames.cpp reads it),
# with vramscope's trail (each frame's lines asked for first from where the last walk found them).
# Nothing drains them: a ring of 1,024 records a thread, about a drain period's worth. What
# vramscope's sink costs beyond these is the price of its own choices.
FLOOR_SINK = r"""
#include <stdint.h>
#include <stdlib.h>
#include <Python.h>
#include <x86intrin.h>
typedef struct { uint64_t addr, size, stream, ticks, seq, stack; const char* node; int32_t kind, device; } record;
#define RING 1024
typedef struct { record* items; uint64_t count; } ring;
static __thread ring t_ring;
static struct { uint64_t next; char pad[56]; } lanes[256] __attribute__((aligned(64)));
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
typedef struct frame { PyObject *func, *globals, *builtins, *locals; PyCodeObject* code; PyObject* obj;
                       struct frame* previous; _Py_CODEUNIT* instr; int stacktop; char is_entry, owner; } frame;
#define FRAMES(t) ((t)->cframe ? (const frame*)(t)->cframe->current_frame : 0)
#elif PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000
typedef struct frame { PyCodeObject* code; struct frame* previous; PyObject *func, *globals, *builtins, *locals, *obj;
                       _Py_CODEUNIT* instr; int stacktop; uint16_t return_offset; char owner; } frame;
#define FRAMES(t) ((t)->cframe ? (const frame*)(t)->cframe->current_frame : 0)
#else
#error "floor walk: CPython 3.11 or 3.12"
#endif
static inline void put(int k, int d, uint64_t a, uint64_t s, uint64_t st, const char* n, uint64_t stack, int ahead) {
    ring* r = &t_ring;
    if (!r->items && !(r->items = aligned_alloc(64, RING * sizeof(record)))) return;
    record* e = &r->items[r->count & (RING - 1)];
    e->addr = a, e->size = s, e->stream = st, e->ticks = __rdtsc(), e->node = n, e->kind = k, e->device = d;
    e->stack = stack;
    e->seq = lanes[(uint8_t)d].next++;
    __atomic_store_n(&r->count, r->count + 1, __ATOMIC_RELEASE);
    if (ahead) __asm__ volatile("prefetchw %0" ::"m"(r->items[r->count & (RING - 1)]));
}
static __thread const void* t_trail[64];
static __thread int t_trail_n;
/* trail: each frame's lines asked for first, where the thread's last walk found them */
static inline uint64_t walk(int trail) {
    if (trail)
        for (int i = 0; i < t_trail_n; ++i) {
            __builtin_prefetch(t_trail[i]);
            __builtin_prefetch((const char*)t_trail[i] + 64);
        }
    uint64_t h = 0;
    PyThreadState* t = PyGILState_GetThisThreadState();
    int depth = 0;
    for (const frame* f = t ? FRAMES(t) : 0; f; f = f->previous, ++depth) {
        if (trail && depth < 64) t_trail[depth] = f;
        if (f->owner != 3) h = ((h << 7) | (h >> 57)) ^ (uint64_t)(uintptr_t)f->code ^ ((uint64_t)(uintptr_t)f->instr << 17);
    }
    if (trail) t_trail_n = depth < 64 ? depth : 64;
    return h;
}
/* k == 0: an allocation, the one kind with a stack here */
void floor_sink(int k, int d, uint64_t a, uint64_t s, uint64_t st, const char* n) { put(k, d, a, s, st, n, 0, 0); }
void floor_ahead_sink(int k, int d, uint64_t a, uint64_t s, uint64_t st, const char* n) { put(k, d, a, s, st, n, 0, 1); }
void floor_ahead_prefetch_sink(int k, int d, uint64_t a, uint64_t s, uint64_t st, const char* n) {
    put(k, d, a, s, st, n, k == 0 ? walk(1) : 0, 1);
}
"""
FLOORS = {"hook-to-floor": "floor_sink", "hook-to-floor-ahead": "floor_ahead_sink",
          "hook-to-floor-ahead-prefetch": "floor_ahead_prefetch_sink"}


def floor_sinks() -> dict[str, int]:
    """The floor's sinks by variant, their addresses (FLOOR_SINK; compiled on first use, kept loaded:
    it needs Python's headers, which only the floor variants do)."""
    import ctypes
    import sysconfig

    from c_library import c_library

    if not hasattr(floor_sinks, "lib"):
        floor_sinks.lib = c_library("floor_sink", FLOOR_SINK, ("-I" + sysconfig.get_paths()["include"],))
    return {v: ctypes.cast(getattr(floor_sinks.lib, f), ctypes.c_void_p).value for v, f in FLOORS.items()}


IN_PROCESS = VARIANTS + ["vramscope-no-stacks", "hook-to-null-sink", *FLOORS]


def in_process(name: str, warmup: int):
    """The workload warmed and a capture started in this process; returns its step, a function that
    puts the process in one of IN_PROCESS's states (torch's recorder stays on until the caller
    turns it off), and one that ends the capture."""
    import torch
    import vramscope
    from vramscope import _core

    torch.cuda.init()
    step = workload(name)
    for _ in range(warmup):
        step()
    capture = vramscope.track(tempfile.mktemp(suffix=".vscope"), summary=False, live_warnings=False).start()
    hook, recorder, sink, nothing = capture._hook, capture._recorder, _core.allocator_sink(), null_sink()
    # A step end belongs to vramscope's steps only: the others are as near a run without vramscope
    # as one process allows (the optimizer's hook still calls into a function that returns, and
    # torch still builds its trace entries for the idle tracker).
    end_step, capturing = capture._steps._end_step, [False]
    capture._steps._end_step = lambda unit: end_step(unit) if capturing[0] else None

    def enter(variant: str) -> None:
        capturing[0] = variant.startswith("vramscope")
        if capturing[0]:
            hook.install(sink)
        elif variant == "hook-to-null-sink":
            hook.install(nothing)
        elif variant in FLOORS:
            hook.install(floor_sinks()[variant])
        else:
            hook.uninstall()
        recorder.set_python_stacks(variant == "vramscope")
        if variant == "torch-recorder":
            torch.cuda.memory._record_memory_history(stacks="python")

    def done() -> None:
        hook.install(sink)
        capture.stop()

    return step, enter, done


def balanced_orders(variants: list[str]) -> list[list[str]]:
    """Williams' orders of `variants`: taken together, they put each variant in every place, and
    right after every other one, equally often, so what one variant leaves behind for the next
    step falls on all of them alike. (A rotation keeps each variant's predecessor: with it,
    vramscope's step followed torch's recorder 4 cycles in 5.)"""
    n = len(variants)
    offsets = [0]
    low, high = 1, n - 1
    while len(offsets) < n:
        offsets.append(low)
        low += 1
        if len(offsets) < n:
            offsets.append(high)
            high -= 1
    orders = [[variants[(i + k) % n] for k in offsets] for i in range(n)]
    return orders + [order[::-1] for order in orders] if n % 2 else orders


def alternate(name: str, cycles: int, warmup: int, variants: list[str]) -> dict:
    """Every variant once a cycle, one step each, the cycles' orders balanced (balanced_orders(); a
    multiple of 10 cycles balances them whole): on a host whose step times spread by +-10 % from
    one step to the next, blocks of steps compare drift as much as variants; here neighbouring
    steps are compared, and every step counts. Torch's recorder gets an untimed step when switched
    on (it starts cold) and another after it is switched off (what it leaves behind is no
    variant's to pay). Returns every variant's step times, cycle by cycle; summarise_alternate()
    makes the figures."""
    import torch

    step, enter, done = in_process(name, warmup)
    times = {v: [] for v in variants}  # times[v][c]: cycle c's step of variant v, ms

    def timed() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        return 1e3 * (time.perf_counter() - t0)

    orders = balanced_orders(variants)
    for c in range(cycles):
        for variant in orders[c % len(orders)]:
            enter(variant)
            if variant == "torch-recorder":
                timed()  # it starts cold
            times[variant].append(timed())
            torch.cuda.memory._record_memory_history(enabled=None)
            if variant == "torch-recorder":
                timed()  # and leaves its history behind: not the next variant's step to pay for
    done()
    return {v: {"times_ms": times[v]} for v in variants}


def summarise_alternate(runs: list[dict], against: str = "none") -> dict:
    """The figures of one or more --alternate runs (separate processes pooled: each run's steps
    divided by its own "none" median first). Per variant: the ratio of its median step to no
    capture's, and of their 20th percentiles; and the paired ratio, the median over cycles of its
    step over the same cycle's "none" step. Each with a 95 % interval from resampling cycles within
    each run. `against`: another variant in the place of "none" (vramscope beside a floor sink, say).
    The paired ratio is the one drift cannot move: the GPU hosts' step time wanders
    between regimes (30 ms for a while, then 50 to 60 ms), which the pooled medians mix unevenly,
    while one cycle's five steps take a fifth of a second."""
    import random

    def normalised(run: dict, v: str, cycle_ids) -> list[float]:
        base = statistics.median(run[against]["times_ms"])
        return [run[v]["times_ms"][i] / base for i in cycle_ids]

    def at(xs: list[float], q: float) -> float:
        xs = sorted(xs)
        return xs[int(q * (len(xs) - 1))]

    def ratio(v: str, picks: list, q: float) -> float:
        mine = [x for run, ids in zip(runs, picks) for x in normalised(run, v, ids)]
        base = [x for run, ids in zip(runs, picks) for x in normalised(run, against, ids)]
        return at(mine, q) / at(base, q)

    def paired(v: str, picks: list) -> float:
        return statistics.median(x for run, ids in zip(runs, picks) for x in cycle_ratios(run, v, ids, against))

    rng = random.Random(0)
    cycles = [len(run[against]["times_ms"]) for run in runs]
    everything = [range(n) for n in cycles]
    draws = [[[rng.randrange(n) for _ in range(n)] for n in cycles] for _ in range(1000)]
    out = {}
    for v in measured(runs):
        row = {"median_ms": statistics.median(t for run in runs for t in run[v]["times_ms"]), "steps": sum(cycles),
               "runs": len(runs)}
        for label, q in (("median", 0.5), ("p20", 0.2)):
            boot = sorted(ratio(v, d, q) for d in draws)
            row[f"{label}_ratio"] = ratio(v, everything, q)
            row[f"{label}_ratio_95"] = [boot[24], boot[974]]
        boot = sorted(paired(v, d) for d in draws)
        row["paired_ratio"], row["paired_ratio_95"] = paired(v, everything), [boot[24], boot[974]]
        out[v] = row
    return out


def cycle_ratios(run: dict, v: str, cycle_ids, against: str = "none") -> list[float]:
    """Each of those cycles' step of variant v over the same cycle's step of `against`."""
    return [run[v]["times_ms"][i] / run[against]["times_ms"][i] for i in cycle_ids]


def per_run_ratios(runs: list[dict], against: str = "none") -> dict:
    """Each --alternate run's own figures, per variant: its median step over its "none" median, and
    its paired ratio. With runs from fresh processes, the median of these and their range are the
    whole set repeated."""
    return {v: ([statistics.median(r[v]["times_ms"]) / statistics.median(r[against]["times_ms"]) for r in runs],
                [statistics.median(cycle_ratios(r, v, range(len(r[against]["times_ms"])), against)) for r in runs])
            for v in measured(runs)}


def measured(runs: list[dict]) -> list[str]:
    """The variants every one of these --alternate runs measured, in IN_PROCESS's order."""
    return [v for v in IN_PROCESS if all(v in run for run in runs)]


def between_processes(figures: list[float]) -> str:
    """The processes' own figures as a sample: their mean and its 95 % interval (Student's t), the
    interval that also holds what differs from one process to the next (placement, clocks)."""
    if len(figures) < 3:
        return ""
    t975 = [12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14, 2.13, 2.12, 2.11,
            2.10, 2.09]
    n, mean = len(figures), statistics.mean(figures)
    half = (t975[n - 2] if n - 2 < len(t975) else 1.96) * statistics.stdev(figures) / n ** 0.5
    return f" (mean x{mean:.3f} [{mean - half:.3f}, {mean + half:.3f}] over {n} processes)"


def processes(args) -> dict[str, list[dict]]:
    """--alternate in `args.processes` fresh processes, one after another: what one process's
    allocator state, placement or clock happens to be cannot decide the figure."""
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.processes):
            out = os.path.join(tmp, f"{n}.json")
            cmd = [sys.executable, __file__, "--alternate", *map(str, args.alternate), "--out", out,
                   "--workloads", *args.workloads, "--variants", *args.variants, "--against", args.against]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"process {n + 1} failed:\n{proc.stdout}{proc.stderr}")
            print(f"process {n + 1} of {args.processes}:\n{proc.stdout}", end="", flush=True)
            with open(out) as f:
                for name, r in json.load(f)["runs"].items():
                    runs.setdefault(name, []).extend(r)
    return runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="+", default=["transformer"], choices=["transformer", "large-kernels"])
    ap.add_argument("--out")
    ap.add_argument("--alternate", nargs=2, type=int, metavar=("CYCLES", "WARMUP"),
                    help="all variants in one process, one step each per cycle (the orders balanced)")
    ap.add_argument("--processes", type=int, default=1, metavar="N",
                    help="with --alternate: N fresh processes, one after another, pooled")
    ap.add_argument("--variants", nargs="+", choices=IN_PROCESS, default=IN_PROCESS,
                    help="with --alternate: these variants only (none among them); fewer make a cycle shorter")
    ap.add_argument("--pool", nargs="+", metavar="JSON", help="the figures of several --alternate --out files together")
    ap.add_argument("--against", default="none", choices=IN_PROCESS,
                    help="with --alternate or --pool: the variant the others are divided by (default: none)")
    ap.add_argument("--alloc-cost", type=int, metavar="PAIRS", help="ns per small allocate+free, by state")
    args = ap.parse_args()
    if args.alloc_cost:
        result = alloc_cost(args.alloc_cost)
        for state, ns in result.items():
            print(f"{state:30s} {ns:8.0f} ns per allocate+free")
        return 0
    if not (args.alternate or args.pool):
        ap.error("give --alternate CYCLES WARMUP (with --processes N), --pool FILES or --alloc-cost PAIRS")
    if args.alternate and "none" not in args.variants:
        ap.error("--variants: every step is compared with its cycle's step of none")
    if args.pool:
        runs: dict[str, list[dict]] = {}
        for path in args.pool:
            with open(path) as f:
                for name, r in json.load(f)["runs"].items():
                    runs.setdefault(name, []).extend(r)
    elif args.processes > 1:
        runs = processes(args)
        print(f"pooled, {args.processes} processes:")
    else:
        runs = {name: [alternate(name, *args.alternate, args.variants)] for name in args.workloads}
    for name, rs in runs.items():
        if any(args.against not in run for run in rs):
            ap.error(f"--against: {args.against} was not measured in every run")
        for v, r in summarise_alternate(rs, args.against).items():
            m, p, c = r["median_ratio_95"], r["p20_ratio_95"], r["paired_ratio_95"]
            print(f"{name:13s} {v:28s} median step {r['median_ms']:7.2f} ms  x{r['median_ratio']:.3f} [{m[0]:.3f}, {m[1]:.3f}]"
                  f"  20th percentile x{r['p20_ratio']:.3f} [{p[0]:.3f}, {p[1]:.3f}]"
                  f"  paired x{r['paired_ratio']:.3f} [{c[0]:.3f}, {c[1]:.3f}]  ({r['steps']} steps, {r['runs']} runs)")
        if len(rs) > 1:
            for v, (ratios, paired) in per_run_ratios(rs, args.against).items():
                print(f"{name:13s} {v:28s} each run x" + " x".join(f"{x:.3f}" for x in ratios) +
                      f"  median of runs x{statistics.median(ratios):.3f}, range x{min(ratios):.3f}-x{max(ratios):.3f};"
                      f"  paired x" + " x".join(f"{x:.3f}" for x in paired) + between_processes(paired))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
