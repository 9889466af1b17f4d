"""What the recorder costs inside a real training step, measured where it is paid: the hook's sink is
called through a C wrapper that counts cycles around each call (lfence, rdtsc), so every event's
cost is taken with the caches as the step left them, not as a loop leaves them. Beside it, each
thread's CPU time per step (/proc's schedstat: the recorder's worker among them) and the step
itself. The variants take turns a step at a time, as in capture_overhead.py --alternate:

  none        the hook idle
  null        the wrapper around a sink that does nothing (torch's side and the wrapper)
  no-stacks   the wrapper around vramscope's sink, Python stacks off
  vramscope   the wrapper around vramscope's sink, Python stacks on

For each: the median step, ns per event of each kind inside the sink (less the null sink's), the
sink's time per step, and which threads other than the training thread ran how long per step.

With --pollute D C (lists of line counts), more: "null, N data lines" and "null, N code lines",
whose wrapper, inside the timed span, also touches N cache lines an event that the step has not
(a 16 MiB buffer read and written N lines at a time, moving on; or N functions each in a line of
its own, called through a table that adds a data line every eight). What such a sink costs the
step beyond its time inside the calls is the price of the lines it evicts, paid later by torch's
own code: the price per line to set against the lines vramscope's sink touches. The buffer fits
a large last-level cache, so its lines evict from the first two levels, where a sink's own
lines, touched every event, live too.

With --fence, two more: "null, fenced" and "vramscope, fenced", whose wrapper waits for the sink's
stores to reach the cache (mfence) inside the timed span. What that adds to vramscope's sink beyond
the null sink's is the stores' own wait, which the unfenced sink leaves to the code after it (torch
releasing its allocator's lock, a locked instruction, waits for them): the part of the step's cost
that happens outside the timed calls because of them, if any.

  python bench/hook_in_situ.py --cycles 100 --warmup 20 --out $OUT/in_situ.json [--fence] [--pollute 64,256 64,256]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from c_library import c_library  # noqa: E402
from capture_overhead import balanced_orders, in_process, null_sink  # noqa: E402

from vramscope.capture.hook import load_allocator_hook  # noqa: E402

WRAPPER = r"""
#include <stdint.h>
#include <x86intrin.h>
typedef void (*sink_fn)(int, int, uint64_t, uint64_t, uint64_t, const char*);
static sink_fn target;
uint64_t ticks_in[16], calls[16], with_node[16];
void set_target(uint64_t t) { target = (sink_fn)(uintptr_t)t; }
/* Lines touched an event beyond the sink's own: data (16 MiB, round and round) and code. */
#define POLLUTION_BYTES (16u << 20)
static volatile unsigned char pollution[POLLUTION_BYTES] __attribute__((aligned(64)));
static uint64_t data_lines, code_lines, at;
typedef void (*block_fn)(void);
extern block_fn code_blocks[];
extern const int code_block_count;
void set_pollution(uint64_t data, uint64_t code) { data_lines = data; code_lines = code < (uint64_t)code_block_count ? code : (uint64_t)code_block_count; }
static inline void pollute(void) {
    for (uint64_t i = 0; i < data_lines; ++i) pollution[(at + i * 64) & (POLLUTION_BYTES - 1)] += 1;
    at = (at + data_lines * 64) & (POLLUTION_BYTES - 1);
    for (uint64_t i = 0; i < code_lines; ++i) code_blocks[i]();
}
uint64_t now_ticks(void) { return __rdtsc(); }
/* fence: also wait for the sink's stores to be globally visible before the second read. */
static inline void timed_call(int fence, int k, int d, uint64_t a, uint64_t s, uint64_t st, const char* n) {
    _mm_lfence();
    uint64_t t0 = __rdtsc();
    _mm_lfence();
    target(k, d, a, s, st, n);
    pollute();
    if (fence) _mm_mfence();
    _mm_lfence();
    uint64_t t1 = __rdtsc();
    ticks_in[k & 15] += t1 - t0;
    calls[k & 15] += 1;
    with_node[k & 15] += n != 0;
}
void timed(int k, int d, uint64_t a, uint64_t s, uint64_t st, const char* n) { timed_call(0, k, d, a, s, st, n); }
void timed_fenced(int k, int d, uint64_t a, uint64_t s, uint64_t st, const char* n) { timed_call(1, k, d, a, s, st, n); }
"""

VARIANTS = ["none", "null", "no-stacks", "vramscope"]


CODE_BLOCKS = 1024


def wrapper() -> ctypes.CDLL:
    """The timing wrapper, with CODE_BLOCKS functions of one line each for the code variants."""
    blocks = "".join(f"__attribute__((noinline, aligned(64))) static void block_{i}(void) {{ __asm__ volatile(\"\"); }}\n"
                     for i in range(CODE_BLOCKS))
    table = "block_fn code_blocks[] = {" + ", ".join(f"block_{i}" for i in range(CODE_BLOCKS)) + "};\n"
    return c_library("in_situ_wrapper", WRAPPER + blocks + table + f"const int code_block_count = {CODE_BLOCKS};\n")


def thread_ns() -> dict[int, int]:
    """Every thread's CPU time so far, ns, by thread id."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0])
        except OSError:
            pass
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--out")
    ap.add_argument("--fence", action="store_true", help="also the null and vramscope sinks with their stores waited for")
    ap.add_argument("--pollute", nargs=2, metavar=("DATA", "CODE"),
                    help="comma-separated line counts: a null sink that also touches that many data (code) lines an event")
    a = ap.parse_args()
    variants = VARIANTS + (["null, fenced", "vramscope, fenced"] if a.fence else [])
    pollution = {}
    if a.pollute:
        for kind, counts in zip(("data", "code"), a.pollute):
            for n in filter(None, counts.split(",")):
                if kind == "code" and int(n) > CODE_BLOCKS:
                    ap.error(f"--pollute: at most {CODE_BLOCKS} code lines")
                pollution[f"null, {int(n)} {kind} lines"] = (int(n), 0) if kind == "data" else (0, int(n))
    variants += list(pollution)
    import torch
    from vramscope import _core

    lib = wrapper()
    lib.now_ticks.restype = ctypes.c_uint64
    k0, t0 = lib.now_ticks(), time.perf_counter()
    time.sleep(0.2)
    ns_per_tick = (time.perf_counter() - t0) * 1e9 / (lib.now_ticks() - k0)
    ticks = (ctypes.c_uint64 * 16).in_dll(lib, "ticks_in")
    calls = (ctypes.c_uint64 * 16).in_dll(lib, "calls")
    with_node = (ctypes.c_uint64 * 16).in_dll(lib, "with_node")
    timed, fenced = (ctypes.cast(f, ctypes.c_void_p).value for f in (lib.timed, lib.timed_fenced))
    step, enter, done = in_process("transformer", a.warmup)
    sink, nothing = _core.allocator_sink(), null_sink()
    hook = load_allocator_hook()  # the capture's own: one library, one sink pointer

    def enter_variant(v: str) -> None:
        sink_of = v.split(",")[0]
        enter("vramscope" if sink_of == "vramscope" else "vramscope-no-stacks" if v != "none" else "none")
        lib.set_pollution(*(ctypes.c_uint64(n) for n in pollution.get(v, (0, 0))))
        if v != "none":
            lib.set_target(ctypes.c_uint64(nothing if sink_of == "null" else sink))
            hook.install(fenced if v.endswith("fenced") else timed)

    rows = {v: {"step_ms": [], "ticks": [[0] * 16], "calls": [[0] * 16], "node": [[0] * 16], "threads": []} for v in variants}
    orders = balanced_orders(variants)
    for c in range(a.cycles):
        for v in orders[c % len(orders)]:
            enter_variant(v)
            before = (list(ticks), list(calls), list(with_node))
            cpu0 = thread_ns()
            torch.cuda.synchronize()
            s0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            s1 = time.perf_counter()
            cpu1 = thread_ns()
            r = rows[v]
            r["step_ms"].append(1e3 * (s1 - s0))
            for key, now, was in (("ticks", ticks, before[0]), ("calls", calls, before[1]), ("node", with_node, before[2])):
                r[key][0] = [x + (n - w) for x, n, w in zip(r[key][0], now, was)]
            r["threads"].append({tid: cpu1[tid] - cpu0.get(tid, 0) for tid in cpu1 if cpu1[tid] - cpu0.get(tid, 0) > 0})
    done()
    kinds = {int(k.value): k.name for k in _core.EventKind.__members__.values()}
    out = {"ns_per_tick": ns_per_tick, "variants": {}}
    base = statistics.median(rows["none"]["step_ms"])
    for v in variants:
        r = rows[v]
        n = len(r["step_ms"])
        per_kind = {}
        for k in range(16):
            if r["calls"][0][k]:
                per_kind[kinds.get(k, str(k))] = {
                    "events_per_step": r["calls"][0][k] / n,
                    "with_node_per_step": r["node"][0][k] / n,
                    "ns_per_event": r["ticks"][0][k] * ns_per_tick / r["calls"][0][k],
                }
        sink_ms = sum(r["ticks"][0]) * ns_per_tick / n / 1e6
        # Threads by CPU time per step, summed over the variant's steps (the training thread first).
        by_thread: dict[int, float] = {}
        for t in r["threads"]:
            for tid, ns in t.items():
                by_thread[tid] = by_thread.get(tid, 0) + ns / n / 1e6
        top = sorted(by_thread.items(), key=lambda kv: -kv[1])[:6]
        out["variants"][v] = {"step_ms": statistics.median(r["step_ms"]), "ratio": statistics.median(r["step_ms"]) / base,
                              "sink_ms_per_step": sink_ms, "per_kind": per_kind,
                              "thread_cpu_ms_per_step": {str(tid): round(ms, 3) for tid, ms in top}}
        print(f"{v:18s} step {statistics.median(r['step_ms']):7.2f} ms  x{statistics.median(r['step_ms']) / base:.3f}  "
              f"in the sink {sink_ms:.3f} ms/step  threads ms/step: "
              + " ".join(f"{tid}:{ms:.2f}" for tid, ms in top))
        for name, pk in per_kind.items():
            print(f"    {name:16s} {pk['events_per_step']:8.1f}/step ({pk['with_node_per_step']:.1f} with a node) "
                  f"{pk['ns_per_event']:8.1f} ns each")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
