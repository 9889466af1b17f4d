"""The hook at full rate, with nothing lost: 1,000 steps, each allocating and freeing
N small tensors from C++ in one call (torch._foreach_add over N tensors), with vramscope's capture
and Python stacks on. Prints the allocation rate through the hook beside the same steps' rate
without capture (in the same process, before it: torch cannot detach a trace hook), and whether
the trace holds every allocation torch counted (allocation.all.allocated).

`--workload churn` allocates and frees the N tensors one by one from a C++ loop (an extension
built on first use, C++ only); on the H100 host that makes 0.36 M allocations a second, most of it
a tensor's own creation. `--workload raw` asks the caching allocator itself for N blocks one by
one (raw_alloc / raw_delete, C++ and CUDA headers): the fastest way through the allocator and its
hook, so the hook's own cost per allocation shows.

  python bench/capture_rate.py --steps 1000 --tensors 4000 --workload churn --out bench/out/capture_rate.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--tensors", type=int, default=4000)
    ap.add_argument("--workload", choices=("foreach", "churn", "raw"), default="foreach")
    ap.add_argument("--out")
    a = ap.parse_args()
    import torch
    import vramscope
    from vramscope import _core

    torch.cuda.init()
    if a.workload == "churn":
        churn = churn_extension().churn

        def one_step():
            churn(a.tensors, 256, True)
    elif a.workload == "raw":
        raw_churn = raw_extension().raw_churn

        def one_step():
            raw_churn(a.tensors, 1024)
    else:
        xs = [torch.zeros(256, device="cuda") for _ in range(a.tensors)]

        def one_step():
            torch._foreach_add(xs, 1.0)  # the outputs are freed as the list is dropped
    for _ in range(3):  # warm the allocator's pools before counting
        one_step()
    torch.cuda.synchronize()

    def run_steps(step_end) -> float:
        t0 = time.perf_counter()
        for _ in range(a.steps):
            one_step()
            step_end()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    bare_seconds = run_steps(lambda: None)
    bare = torch.cuda.memory_stats()["allocation.all.allocated"] - before
    path = os.path.join(tempfile.mkdtemp(), "rate.vscope")
    capture = vramscope.track(path, summary=False, live_warnings=False).start()
    assert capture.active, "vramscope capture did not attach"
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    seconds = run_steps(vramscope.step)
    counted = torch.cuda.memory_stats()["allocation.all.allocated"] - before
    capture.stop()
    captured = capture.allocations
    # Counted as torch counts entries: an allocation is one, its free two (requested, completed).
    in_trace = json.loads(_core.analyze_json(path))["events"]
    result = {"workload": a.workload, "steps": a.steps, "tensors_per_step": a.tensors, "seconds": seconds,
              "allocations_torch_counted": counted, "allocations_captured": captured,
              "allocations_per_second": counted / seconds, "uncaptured_allocations_per_second": bare / bare_seconds,
              "captured_over_uncaptured_seconds": seconds / bare_seconds, "lost": counted - captured,
              "trace_holds_every_pair": in_trace >= 3 * counted,
              "trace_events": in_trace, "trace_bytes": os.path.getsize(path), "torch": torch.__version__,
              "device": torch.cuda.get_device_name()}
    print(f"{counted:,} allocations in {seconds:.2f} s: {counted / seconds / 1e6:.2f} M allocations/s through the "
          f"hook ({bare / bare_seconds / 1e6:.2f} M/s without capture, x{seconds / bare_seconds:.2f} the time); "
          f"captured {captured:,}, lost {counted - captured:,}; trace {in_trace:,} events")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if counted == captured and in_trace >= 3 * counted else 1


def churn_extension():
    """churn(n, numel, cuda): n tensors allocated and freed one after another, from C++."""
    from torch.utils.cpp_extension import load_inline

    source = """
    #include <torch/extension.h>
    void churn(int64_t n, int64_t numel, bool cuda) {
        auto options = torch::TensorOptions().dtype(torch::kFloat).device(cuda ? torch::kCUDA : torch::kCPU);
        for (int64_t i = 0; i < n; ++i) torch::empty({numel}, options);
    }
    """
    return load_inline("vramscope_churn", cpp_sources=source, functions=["churn"], verbose=False)


def raw_extension():
    """raw_churn(n, bytes): n blocks taken from the CUDA caching allocator and given back, one after
    another, on the current stream, with no tensor around them."""
    from torch.utils.cpp_extension import load_inline

    source = """
    #include <torch/extension.h>
    #include <c10/cuda/CUDACachingAllocator.h>
    void raw_churn(int64_t n, int64_t bytes) {
        for (int64_t i = 0; i < n; ++i)
            c10::cuda::CUDACachingAllocator::raw_delete(c10::cuda::CUDACachingAllocator::raw_alloc(bytes));
    }
    """
    return load_inline("vramscope_raw_churn", cpp_sources=source, functions=["raw_churn"], with_cuda=True,
                       verbose=False)


if __name__ == "__main__":
    sys.exit(main())
