"""What a leak's memory is, as Python sees it: the objects an owner search looks for, one rule per
kind of memory (findings' `memory` and `library`).

torch's memory is tensors; torch's pinned host memory is pinned CPU tensors; CuPy's and JAX's device
memory is their arrays. NCCL's memory belongs to communicators no address leads to: what keeps them
is torch.distributed's group registry, named as the answer. Any other library's own allocations
(an extension's cudaMalloc, cuBLAS's workspace) have no Python object at all, and the answer says so.
A library is looked at only when the run imported it: a search never imports one.
"""

from __future__ import annotations

import gc
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from .. import _core
from .._core import format_bytes
from .blocks import every_in_blocks, in_blocks
from .paths import OwnerPath, describe_tensor

Block = tuple[int, int]  # (address, size)

# The holder names analysis/libraries.cpp gives the libraries whose memory Python objects stand for.
TORCH, NCCL, CUPY, JAX = "torch", "NCCL", "CuPy", "JAX/XLA"


@dataclass
class Targets:
    """For one leak: the objects whose memory lies in its blocks, how a path names one (`describe`)
    and its bytes (`nbytes`: the search looks for the bulk of them); `missing`, the answer when there
    are none. `known`: an answer no search is needed for (a registry that holds them all)."""

    objects: list[Any]
    missing: str
    describe: Callable[[Any], str] = describe_tensor
    nbytes: Callable[[Any], int] = lambda t: int(t.untyped_storage().nbytes())
    known: list[OwnerPath] = field(default_factory=list)


def pooled(leak: dict[str, Any]) -> bool:
    """A leak the library's own count of its pool showed (evidence pool-in-use): its blocks are the
    pool's, oldest first, and each holds many of the library's arrays."""
    evidence = leak.get("evidence")
    return str(getattr(evidence, "spelling", evidence)) == _core.LeakEvidence.pool_in_use.spelling


def memory_of(leak: dict[str, Any]) -> str:
    """A leak's memory; findings and live lines from before memory outside torch's allocator was
    seen have none, and were torch's."""
    return str(leak.get("memory", _core.Memory.torch.spelling))


def targets_of(leak: dict[str, Any], blocks: list[Block], device_type: str) -> Targets:
    """The rule for this leak's memory and library, applied to its (address, size) blocks."""
    memory, library = memory_of(leak), leak.get("library", "")
    if memory == _core.Memory.torch.spelling:
        return torch_tensors(leak["device"], blocks, device_type)
    if library == NCCL:  # device buffers and pinned host memory alike: the communicators'
        return process_groups("nccl")
    if memory == _core.Memory.external.spelling and library in (CUPY, JAX):
        arrays = cupy_arrays if library == CUPY else jax_arrays
        return arrays(blocks, every=pooled(leak))
    if memory == _core.Memory.pinned.spelling and library == TORCH:
        return pinned_tensors(blocks)
    return own_allocations(library)


def torch_tensors(device: int, blocks: list[Block], device_type: str = "cuda") -> Targets:
    """Tensors on the leak's device whose storage starts in a block. `device_type` "cpu": the blocks
    of a live-tensor capture, which has no device number of its own."""
    import torch

    def candidates() -> Iterator[tuple[Any, int]]:
        for obj in gc.get_objects():
            # type(), not isinstance(): a dead weakref proxy raises ReferenceError on __class__.
            if not issubclass(type(obj), torch.Tensor):
                continue
            try:
                where = obj.device
                if where.type == device_type and (device_type != "cuda" or where.index == device):
                    yield obj, obj.untyped_storage().data_ptr()
            except Exception:  # a tensor subclass or fake tensor without storage
                continue

    return Targets(in_blocks(blocks, candidates()),
                   "no live tensor of this leak was found from Python (freed since, or held by C++ state)")


def pinned_tensors(blocks: list[Block]) -> Targets:
    """CPU tensors in page-locked memory (torch's host allocator: pin_memory=True, .pin_memory(), a
    DataLoader's pinned batches) whose storage starts in a block."""
    import torch

    def candidates() -> Iterator[tuple[Any, int]]:
        for obj in gc.get_objects():
            if not issubclass(type(obj), torch.Tensor):
                continue
            try:
                if obj.device.type == "cpu":
                    yield obj, obj.untyped_storage().data_ptr()
            except Exception:
                continue

    def pinned(t: Any) -> bool:
        try:
            return bool(t.is_pinned())
        except Exception:  # a tensor subclass that cannot say
            return False

    return Targets(in_blocks(blocks, candidates(), accept=pinned),
                   "no live pinned tensor of this leak was found from Python (freed since, or held by C++ state)",
                   describe=lambda t: describe_tensor(t) + " pinned")


def cupy_arrays(blocks: list[Block], every: bool = False) -> Targets:
    """cupy.ndarray objects whose memory starts in a block: a block is what CuPy's memory pool took
    from the driver, and an array lies inside one. Device pointers are unique in the process (CUDA's
    unified addressing), so the address alone says which block. `every`: all of them, oldest first
    (a leak its pool's count showed: every_in_blocks), else one a block."""
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return Targets([], "CuPy is not imported in this process, so its arrays cannot be looked at")

    def candidates() -> Iterator[tuple[Any, int]]:
        for obj in gc.get_objects():
            if issubclass(type(obj), cupy.ndarray):
                try:
                    yield obj, obj.data.ptr
                except Exception:
                    continue

    return Targets((every_in_blocks if every else in_blocks)(blocks, candidates()),
                   "no live CuPy array of this leak was found from Python (freed since, or kept by CuPy's memory "
                   "pool: cupy.get_default_memory_pool().free_all_blocks() gives cached blocks back)",
                   describe=describe_cupy, nbytes=lambda a: int(a.nbytes))


def jax_arrays(blocks: list[Block], every: bool = False) -> Targets:
    """jax.Array objects with a shard whose buffer starts in a block (jax.live_arrays(): every array
    the client holds). `every`: all of them, oldest first (a leak its pool's count showed), else one a
    block."""
    jax = sys.modules.get("jax")
    if jax is None:
        return Targets([], "JAX is not imported in this process, so its arrays cannot be looked at")

    def candidates() -> Iterator[tuple[Any, int]]:
        for array in jax.live_arrays():
            try:
                for shard in array.addressable_shards:
                    yield array, shard.data.unsafe_buffer_pointer()
            except Exception:  # deleted or donated since
                continue

    return Targets((every_in_blocks if every else in_blocks)(blocks, candidates()),
                   "no live JAX array of this leak was found from Python (freed since, or kept by XLA's allocator)",
                   describe=describe_jax, nbytes=lambda a: int(a.nbytes))


def process_groups(backend: str) -> Targets:
    """NCCL's memory is its communicators', one or more per process group, and torch.distributed's
    group registry holds every group until destroy_process_group(): the answer is the registry, a
    real root (the module's dict), ending at its newest group. A search would stop at whatever else
    reaches a group first (the loop's local), which is not what keeps the communicator."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is None:
        return Targets([], "torch.distributed is not imported in this process: no process group holds this memory")
    registry = c10d._world.pg_map  # the group -> (backend, store) dict; _world is how torch reaches it
    groups = [g for g, (name, _) in list(registry.items()) if backend in str(name).lower()]
    if not groups:
        return Targets([], f"no {backend} process group is alive in torch.distributed's group registry "
                           "(destroyed since, or the communicator was made outside torch.distributed)")
    # The module's own name for the dict, whatever this torch calls it (_pg_map since torch 2.0).
    root = next((f"{c10d.__name__}.{k}" for k, v in vars(c10d).items() if v is registry),
                f"{c10d.__name__}._world.pg_map")
    newest = groups[-1]  # groups are registered in the order they are made
    name = c10d._world.pg_names.get(newest, "?")
    ranks = newest.size()
    target = (f"ProcessGroup {name!r} ({registry[newest][0]}, {ranks} rank{'s' if ranks != 1 else ''}); "
              f"torch.distributed's group registry (_world.pg_map) holds {len(groups)} {backend} "
              f"group{'s' if len(groups) != 1 else ''}")
    return Targets([], "", known=[OwnerPath(root, ["<dict key>"], target)])


def own_allocations(library: str) -> Targets:
    """Memory a library took for itself (an extension's cudaMalloc, a cuBLAS workspace)."""
    return Targets([], f"held by {library}'s own allocations: no Python object maps to them")


def describe_cupy(a: Any) -> str:
    return f"cupy.ndarray {format_bytes(a.nbytes)} {a.dtype} {list(a.shape)} cuda:{a.device.id}"


def describe_jax(a: Any) -> str:
    devices = ", ".join(sorted(str(d) for d in a.devices()))
    return f"jax.Array {format_bytes(a.nbytes)} {a.dtype} {list(a.shape)} {devices}"
