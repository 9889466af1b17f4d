"""What a trace says about the process that recorded it: the run (command, versions, host, rank),
each device (name, capacity, memory in use before capture) and what was captured besides torch's
allocator (the meta capture.driver and capture.nvml, and the start line)."""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time
from typing import TYPE_CHECKING, Any

from . import naming

if TYPE_CHECKING:
    from .._core import Recorder


def describe(recorder: Recorder, live_tensors: bool, device_memory: int) -> None:
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


def _capacity(torch: Any, device: int, total: int) -> int:
    """What this process may allocate on a device: its total, under a cap set with
    torch.cuda.set_per_process_memory_fraction (where this torch can say)."""
    fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    try:
        return int(total * fraction(device)) if fraction is not None else total
    except Exception:
        return total


DRIVER_OFF_BY_USER = "off: turned off (track(driver=False) or VRAMSCOPE_DRIVER=0)"


def driver_wanted(driver: bool | None) -> bool:
    """Driver-level capture is on unless the caller or VRAMSCOPE_DRIVER=0 turns it off."""
    return driver if driver is not None else os.environ.get("VRAMSCOPE_DRIVER", "1") != "0"


def module_paths_wanted(module_paths: bool | None) -> bool:
    """Module instance paths are recorded when the caller or VRAMSCOPE_MODULE_PATHS=1 asks (a hook on
    every module call: docs/benchmarks.md's module-paths-cost is its cost)."""
    return module_paths if module_paths is not None else os.environ.get("VRAMSCOPE_MODULE_PATHS", "0") == "1"


def cupti_dirs(torch: Any) -> list[str]:
    """The folders of torch's wheel that ship libcupti (nvidia/cu13/lib, nvidia/cuda_cupti/lib): the
    copy that matches the torch that profiles, searched before the loader's path."""
    from pathlib import Path

    nvidia = Path(torch.__file__).resolve().parent.parent / "nvidia"
    return sorted({str(p.parent) for p in nvidia.glob("*/lib/libcupti.so*")})


def pci_bus_id(props: Any) -> str:
    """A device's PCI bus id as NVML spells it (domain:bus:device.function, hex)."""
    return f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"


def used_devices(torch: Any) -> list[int]:
    """The devices this process holds memory on, or its current one: NVML lists a process only
    where it has a context (another rank's device would be read as this one's in a container)."""
    used = [d for d in range(torch.cuda.device_count()) if torch.cuda.memory_reserved(d) > 0]
    return used or [torch.cuda.current_device()]


def sources_line(driver: str, nvml: str) -> str:
    """The start line: what this capture records besides torch's allocator, and why not where not."""
    seen, unseen = ["torch's allocator"], []
    if driver == "cupti":
        seen.append("memory outside it (CUPTI: libraries' device memory, pinned host memory)")
    else:
        unseen.append(f"memory outside torch's allocator ({driver})")
    if nvml.startswith("on"):
        seen.append(f"NVML's figure for this process{nvml[2:]}")
    else:
        unseen.append(f"NVML's figure ({nvml})")
    line = "capturing " + ", ".join(seen[:-1]) + (" and " if len(seen) > 1 else "") + seen[-1]
    return line + ("; not " + "; not ".join(unseen) if unseen else "")
