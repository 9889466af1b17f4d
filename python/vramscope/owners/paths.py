"""who_holds(): the shortest reference paths from a root to a piece of memory.

Roots are module globals, locals of live frames (every thread) and class attributes; the walk is
breadth-first over edges.py, the user's own modules and frames first, the rest of the process
only if that finds nothing. Memory no root reaches is either in a reference cycle (gc would free
it: found by a collection that keeps what it would free) or in a cycle through the autograd
graph, which gc cannot see and so never frees.
"""

from __future__ import annotations

import gc
import sys
import time
import types
import warnings
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, cast

from .. import _core
from .._core import format_bytes
from .edges import EXTRA_TYPES as _EXTRA_TYPES, edges, frame_locals

_LIBRARY_MARKERS = ("site-packages", "dist-packages", "/lib/python3", "<frozen")
_PACKAGE_DIR = __file__.rsplit("/", 2)[0]  # vramscope's own frames are never owners
Describe = Callable[[Any], str]  # how a path names the object at its end


@dataclass
class OwnerPath:
    """One way the memory is kept alive: root, edges, and what it ends at."""

    root: str
    edges: list[str] = field(default_factory=list)
    target: str = ""
    kind: str = "reachable"  # "reachable", "cycle, freed only by gc", "cycle through autograd, never freed"

    @property
    def path(self) -> str:
        return self.root + "".join(e if e.startswith(("[", ".")) else " " + e for e in self.edges)

    def __str__(self) -> str:
        tail = "" if self.kind == "reachable" else f"   ({self.kind})"
        return f"{self.path}  → {self.target}{tail}"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "root": self.root, "edges": self.edges, "target": self.target, "kind": self.kind}


def describe_tensor(t: Any) -> str:
    storage = t.untyped_storage()
    dtype = str(t.dtype).replace("torch.", "").replace("float", "f").replace("int", "i")
    text = f"Tensor {format_bytes(t.numel() * t.element_size())} {dtype} {list(t.shape)} {t.device}"
    if storage.nbytes() > t.numel() * t.element_size():
        text += f" (view of a {format_bytes(storage.nbytes())} storage)"
    return text


def _is_user_file(path: str | None) -> bool:
    return path is not None and bool(path) and not any(m in path for m in _LIBRARY_MARKERS)


def tensors_holding(target: Any) -> list[Any]:
    """The tensors whose storage is the target's, or (for (device, address)) contains it."""
    import torch

    if isinstance(target, torch.Tensor):
        device, address = target.device, target.untyped_storage().data_ptr()
    else:
        device, address = target
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    found = []
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance asks a weakref proxy for its __class__, and a dead
        # one raises ReferenceError (torch.compile leaves such proxies around).
        if issubclass(type(obj), torch.Tensor) and obj.device == device:
            s = obj.untyped_storage()
            start = s.data_ptr()
            if start == address or (not isinstance(target, torch.Tensor) and start <= address < start + s.nbytes()):
                found.append(obj)
    return found


def _roots(skip_frames: set[int], user_only: bool) -> Iterator[tuple[str, object]]:
    main = sys.modules.get("__main__")
    modules = [("__main__", main)] if main else []
    modules += [(n, m) for n, m in list(sys.modules.items()) if n != "__main__" and m is not None]
    for name, module in modules:
        try:  # sys.modules may hold proxies and lazy objects whose attributes raise
            user = name == "__main__" or _is_user_file(getattr(module, "__file__", None))
            names = list(vars(module).items()) if user_only == user else []
        except Exception:
            continue
        for key, value in names:
            if not key.startswith("__"):
                yield f"{name}.{key}", value
    if not user_only:
        return
    # No name may keep a frame once the walk up a thread ends: this thread's top frame is this
    # generator's own, and a local holding it keeps it, and every frame below, alive in a cycle.
    frame: types.FrameType | None
    for frame in sys._current_frames().values():
        while frame is not None:
            # Module-level frames' locals are the module's globals, named above already (None).
            if id(frame) not in skip_frames and not frame.f_code.co_filename.startswith(_PACKAGE_DIR):
                try:
                    local_items = list((frame_locals(frame) or {}).items())
                except Exception:  # a frame finishing on another thread
                    local_items = []
                for key, value in local_items:
                    yield f"{frame.f_code.co_name}() local '{key}'", value
            frame = frame.f_back


def who_holds(target: Any, *, max_paths: int = 3, timeout: float = 5.0) -> list[OwnerPath]:
    """Up to max_paths shortest paths from a root (module global, local of a live frame, class
    attribute) to `target`: a tensor, or a (device, address) pair meaning the storage that contains
    that address. The caller's own references are not owners. str() of each path reads as
    `__main__.HISTORY[7].logits  → Tensor 32.0 MiB f32 [4, 256, 8192] cuda:0`."""
    deadline = time.monotonic() + timeout
    caller: types.FrameType | None = sys._getframe(1)
    while caller is not None and caller.f_code.co_filename.startswith(_PACKAGE_DIR):
        caller = caller.f_back  # called through vramscope (explain()): the user's frame is the caller
    # Looking at every object (deprecated module attributes too) must not warn the user.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        targets = tensors_holding(target)
        del target
        # What holds a target: the caller's frame and ours are not owners.
        skip_frames = {id(caller), id(sys._getframe())}  # ids: a set of frames would hold ours in a cycle
        del caller
        return holders_of(targets, skip_frames, max_paths, deadline)


def holders_of(targets: list[Any], skip_frames: set[int], max_paths: int, deadline: float,
               describe: Describe = describe_tensor) -> list[OwnerPath]:
    """One search for all targets (tensors, or any object: a CuPy or JAX array; `describe` names one
    at a path's end): paths to whichever of them the roots reach first. A cycle is named only when no
    root reaches them (no module, no frame of any thread, no global): a tensor a root keeps may also
    sit in some dead cycle, and that cycle is not why it lives."""
    if not targets:
        return []
    # Cycles are read first, before a collection during the walk frees them, and named last.
    cycles = _in_gc_cycle(targets, max_paths, describe)
    target_ids = {id(t): t for t in targets}
    found = _breadth_first(_roots(skip_frames, True), target_ids, max_paths, deadline, describe)
    if not found and time.monotonic() < deadline:
        found = _breadth_first(_roots(skip_frames, False), target_ids, max_paths, deadline, describe)
    if not found:
        found = cycles
    if not found:
        found = _autograd_cycle(targets, deadline)
    return found[:max_paths]


class _TargetEdges:
    """A node's edges with each tensor that is a target in another Python object (same memory,
    shape and strides) standing for that target. An autograd node hands out its saved tensors as new
    objects at every access (a saved output always): never the target's identity."""

    def __init__(self, target_ids: dict[int, Any]):
        import torch

        self._tensor = torch.Tensor
        self._targets_by_view: dict[tuple[object, ...], Any] = {}
        for t in target_ids.values():
            if issubclass(type(t), torch.Tensor):  # only a tensor has copies that stand for it
                self._targets_by_view.setdefault(self._key(t), t)

    def __call__(self, obj: object) -> list[tuple[str, object]]:
        return [(label, self._as_target(child)) for label, child in _safe_edges(obj)]

    def children(self, obj: object) -> list[object]:
        return [child for _, child in self(obj)]

    @staticmethod
    def _key(t: Any) -> tuple[object, ...]:
        return t.device, t.data_ptr(), tuple(t.shape), t.stride()

    def _as_target(self, child: object) -> object:
        if not issubclass(type(child), self._tensor):
            return child
        try:
            return self._targets_by_view.get(self._key(child), child)
        except Exception:  # a tensor without storage (fake, meta, sparse)
            return child


def _breadth_first(roots: Iterable[tuple[str, object]], target_ids: dict[int, Any], max_paths: int, deadline: float,
                   describe: Describe = describe_tensor,
                   by_view: bool = True) -> list[OwnerPath]:
    """The walk itself runs in C++ (_core.reference_walk); only the hops of the paths it returns
    are named here. by_view: a target's saved copies count as the target (_TargetEdges)."""
    root_list = list(roots)  # also closes the generator, which would otherwise hold our frames
    # Held until the walk ends: an id is only an object's while it lives, and vars() of what is not
    # a module (a lazy proxy in sys.modules) makes a new dict whose address a node the walk creates
    # may take, and then be skipped.
    module_dicts = [_namespace(m) for m in list(sys.modules.values()) if m is not None]
    skip = {id(d) for d in module_dicts if d is not None} | {id(sys.modules), id(root_list), id(target_ids)}
    edges_of = _TargetEdges(target_ids if by_view else {})
    # The binding returns [(root label, [objects])] (owners/reference_walk.h).
    chains = cast("list[tuple[str, list[object]]]",
                  _core.reference_walk(root_list, set(target_ids), _EXTRA_TYPES, edges_of.children, skip, max_paths,
                                       max(0.0, deadline - time.monotonic())))
    return [OwnerPath(label, _name_hops(chain, edges_of), describe(chain[-1])) for label, chain in chains]


def _namespace(module: object) -> dict[str, Any] | None:
    try:
        return vars(module)
    except TypeError:  # an object in sys.modules without a __dict__
        return None


def _name_hops(chain: list[object], edges_of: _TargetEdges) -> list[str]:
    """Labels for parent → child hops. gc's edges pass through objects Python spelling skips
    (an instance's __dict__, a closure's cell, a module's _modules dict): a label that reaches a
    later object of the chain directly stands for the hops in between."""
    labels: list[str] = []
    i = 0
    while i < len(chain) - 1:
        reachable: dict[int, str] = {}
        for label, child in edges_of(chain[i]):
            reachable.setdefault(id(child), label)
        for skip in (1, 2, 3):
            if i + skip < len(chain) and id(chain[i + skip]) in reachable:
                labels.append(reachable[id(chain[i + skip])])
                i += skip
                break
        else:
            labels.append("<referent>")
            i += 1
    return labels


def _in_gc_cycle(targets: list[Any], max_paths: int, describe: Describe) -> list[OwnerPath]:
    """Collects with DEBUG_SAVEALL, so what only a cycle keeps stays visible; then frees it."""
    flags = gc.get_debug()
    gc.set_debug(flags | gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        garbage = list(gc.garbage)
        gc.garbage.clear()
    finally:
        gc.set_debug(flags)
    found: list[OwnerPath] = []
    ids = {id(t) for t in targets}
    garbage_ids = {id(o): o for o in garbage}
    for holder in garbage:
        if len(found) >= max_paths:
            break
        for label, child in _safe_edges(holder):
            if id(child) in ids:
                cycle = _cycle_through(holder, garbage_ids)
                found.append(OwnerPath(f"<cycle of {len(cycle)} objects: {type(holder).__name__}>", [label],
                                       describe(child), "cycle, freed only by gc"))
                break
    del garbage, garbage_ids
    gc.collect()  # now let the cycles go, as gc would have
    return found


def _cycle_through(start: object, members: dict[int, object]) -> list[object]:
    """The objects of the cycle start is part of (breadth-first back to start)."""
    parent: dict[int, object | None] = {id(start): None}
    queue = deque([start])
    while queue:
        obj = queue.popleft()
        for _, child in _safe_edges(obj):
            if child is start:
                chain = [obj]
                while parent[id(chain[-1])] is not None:
                    chain.append(parent[id(chain[-1])])
                return chain[::-1]
            if id(child) in members and id(child) not in parent:
                parent[id(child)] = obj
                queue.append(child)
    return [start]


def _autograd_cycle(targets: list[Any], deadline: float) -> list[OwnerPath]:
    """A tensor reachable from itself through its autograd graph: gc cannot see those edges."""
    for t in targets:
        # Identity only: a node keeps its own output saved without the grad_fn, which is no cycle.
        grad_fn = getattr(t, "grad_fn", None)  # a CuPy or JAX array has no autograd graph
        found = _breadth_first([("<tensor>", grad_fn)] if grad_fn is not None else [],
                               {id(t): t}, 1, deadline, by_view=False)
        if found:
            p = found[0]
            return [OwnerPath("<cycle through its own graph> .grad_fn", p.edges, p.target,
                              "cycle through autograd, never freed")]
    return []


def _safe_edges(obj: object) -> list[tuple[str, object]]:
    try:
        return list(edges(obj))
    except Exception:
        return []
