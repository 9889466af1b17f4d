"""What NVML's reading at close shows after a run's last step end, beside what the capture recorded
there (GPU; the analysis' check of that reading, docs/findings.md, was decided on its output).

A small transformer trains 40 steps under capture, then does what a script does after its last
step: an eval on new shapes, an SVD and a sort (kernels training never ran: modules loaded late),
a checkpoint saved, the optimizer's state copied to the host. Then the capture stops and the trace
is analysed. "slow" pauses 30 ms a step, so that every step end reads NVML; "fast" does not, so
most do not (the reading at close then meets memory changed since the last step end).

  python3 bench/nvml_after_last_step.py OUT_DIR slow; python3 bench/nvml_after_last_step.py OUT_DIR fast
      (each mode in a process of its own: pynvml's figure and torch's reserved bytes at the last step end and before the
      stop, the trace's last timeline points, the usage ledger, the verdict and the notes, into
      OUT_DIR/after-MODE.json and on stdout)
"""

import json
import os
import sys
import tempfile
import time

import pynvml
import torch

import vramscope


def this_process_on_nvml(handle) -> int | None:
    for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
        if p.pid == os.getpid():
            return p.usedGpuMemory
    return None


def run(mode: str, out: str) -> dict:
    handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True) for _ in range(4)]).cuda()
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(8, 128, 256, device="cuda")
    path = os.path.join(tempfile.mkdtemp(), f"after-{mode}.vscope")
    capture = vramscope.track(path, summary=False, live_warnings=False).start()
    for _ in range(40):
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if mode == "slow":
            time.sleep(0.03)
    at_last_step = (this_process_on_nvml(handle), torch.cuda.memory_reserved())
    model.eval()
    with torch.no_grad():
        y = model(x[:, :17])
        (torch.linalg.svd(torch.randn(64, 64, device="cuda"))[1].sum() + y.sort(dim=-1)[0].sum()).item()
    torch.save(model.state_dict(), path + ".pt")
    host_state = {k: v.cpu() for k, v in opt.state_dict()["state"][0].items() if torch.is_tensor(v)}
    torch.cuda.synchronize()
    before_stop = (this_process_on_nvml(handle), torch.cuda.memory_reserved())
    capture.stop()
    f = vramscope.analyze(path)
    timeline = [p for p in f["timeline"] if p["device"] == torch.cuda.current_device()]
    result = {"mode": mode, "nvml_and_reserved_at_last_step": at_last_step, "nvml_and_reserved_before_stop": before_stop,
              "host_state_tensors": len(host_state), "steps_read": [p["step"] for p in timeline if p["nvml_used"] is not None],
              "timeline_tail": timeline[-3:], "usage": f["usage"], "verdict": f["verdict"], "notes": f["notes"]}
    with open(os.path.join(out, f"after-{mode}.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    return result


def main() -> int:
    out, mode = sys.argv[1], sys.argv[2]
    torch.cuda.init()
    pynvml.nvmlInit()
    print(json.dumps(run(mode, out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
