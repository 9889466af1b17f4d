"""The libraries' own pools, read at each step end beside NVML's figure (the recorder queues them
before the step's marker: EventKind.pool_usage).

A library that sub-allocates from a pool of its own hides its arrays from the driver's calls: XLA's
pool grows in doublings, or takes 75 % of the device at once, and CuPy's keeps what its arrays free.
What the library itself counts in use is the figure a leak is judged by (analysis/pools.h):

- JAX: each GPU device's memory_stats(): bytes_in_use, and pool_bytes (bytes_reserved, else
  bytes_limit, where this jaxlib has no pool_bytes);
- CuPy: its default memory pool's used_bytes() and total_bytes(), on its current device.

A library is read only when the run imported it (sys.modules) and, for JAX, once its backends are
up: a read never imports a library or starts one. A read that fails is said once, and that library
is not read again in this process; the run goes on either way.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from .say import warn

Reading = tuple[int, str, int, int]  # (device, library as analysis/libraries.cpp names it, in use, pool)

# The holder names analysis/libraries.cpp gives them (owners/targets.py spells them alike).
JAX, CUPY = "JAX/XLA", "CuPy"


def jax_pools() -> list[Reading]:
    """Each JAX GPU device's bytes in use and pool, once JAX's backends are up."""
    jax, bridge = sys.modules.get("jax"), sys.modules.get("jax._src.xla_bridge")
    if jax is None or bridge is None or not _backends_up(bridge):
        return []
    out = []
    for device in jax.local_devices():
        if device.platform not in ("gpu", "cuda", "rocm"):
            continue
        stats = device.memory_stats() or {}
        if "bytes_in_use" not in stats:
            continue
        pool = stats.get("pool_bytes", stats.get("bytes_reserved", stats.get("bytes_limit", 0)))
        ordinal = getattr(device, "local_hardware_id", None)
        out.append((int(device.id if ordinal is None else ordinal), JAX, int(stats["bytes_in_use"]), int(pool)))
    return out


def _backends_up(bridge: Any) -> bool:
    """Whether JAX has made its backends: asking a device before would make them (and, by default,
    preallocate 75 % of the GPU)."""
    up = getattr(bridge, "backends_are_initialized", None)
    if callable(up):
        return bool(up())
    return bool(getattr(bridge, "_backends", None))


def cupy_pools() -> list[Reading]:
    """CuPy's default memory pool on its current device: what its arrays use, what it holds."""
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return []
    pool = cupy.get_default_memory_pool()
    return [(int(cupy.cuda.runtime.getDevice()), CUPY, int(pool.used_bytes()), int(pool.total_bytes()))]


READERS: dict[str, Callable[[], list[Reading]]] = {JAX: jax_pools, CUPY: cupy_pools}


class PoolCounters:
    """Reads every imported library's pools; never raises."""

    def __init__(self, readers: dict[str, Callable[[], list[Reading]]] | None = None):
        self.readers = dict(READERS if readers is None else readers)

    def read(self) -> list[Reading]:
        out: list[Reading] = []
        for library, reader in list(self.readers.items()):
            try:
                out += reader()
            except Exception as e:
                del self.readers[library]
                warn(f"could not read {library}'s own pool ({type(e).__name__}: {e}); its memory is judged by "
                     "the driver's calls from here on", f"pool-{library}")
        return out
