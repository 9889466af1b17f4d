"""What a trace says about the process that recorded it: the run (command, versions, host, rank)
and each device (name, capacity, memory in use before capture)."""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time

from . import naming


def describe(recorder, live_tensors: bool, device_memory: int) -> None:
    """Writes the meta and devices; `device_memory` > 0: the budget each device is judged against."""
    import torch

    meta = {
        "command": json.dumps(sys.argv),
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "pid": str(os.getpid()),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "capture": "vramscope live tensors" if live_tensors else "vramscope live",
    }
    for key, env in (("rank", "RANK"), ("world_size", "WORLD_SIZE"), ("local_rank", "LOCAL_RANK")):
        if os.environ.get(env) is not None:
            meta[key] = os.environ[env]
    if "rank" not in meta and (rank := naming.process_rank()) is not None:  # a group up without RANK
        meta["rank"] = str(rank)
        meta["world_size"] = str(torch.distributed.get_world_size())
    for key, value in meta.items():
        recorder.meta(key, value)
    if live_tensors:
        from .live_tensors import CPU_DEVICE

        recorder.meta(f"device.{CPU_DEVICE}", "cpu")
        recorder.device(CPU_DEVICE, 0, 0, 0, budget=device_memory)  # no capacity of its own
    else:
        # The trace keeps the device as it is; the user's device_memory is a budget that the live
        # monitor and the analysis at the end project against (a trace claiming less capacity
        # than it holds is a fault).
        for d in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(d)
            recorder.meta(f"device.{d}", props.name)
            recorder.device(d, _capacity(torch, d, props.total_memory), torch.cuda.memory_allocated(d),
                            torch.cuda.memory_reserved(d), budget=device_memory)
    recorder.name_stream(0, "default stream")


def _capacity(torch, device: int, total: int) -> int:
    """What this process may allocate on a device: its total, under a cap set with
    torch.cuda.set_per_process_memory_fraction (where this torch can say)."""
    fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    try:
        return int(total * fraction(device)) if fraction is not None else total
    except Exception:
        return total
