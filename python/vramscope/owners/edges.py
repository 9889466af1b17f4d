"""What an object holds, each reference spelled the way Python would reach it.

gc.get_referents() sees containers and attributes, but not the autograd graph: a tensor's
grad_fn, a node's next_functions and saved tensors, a custom Function's ctx live in C++. Those
edges are added here by asking torch for them, so a path can go from a kept loss through its
graph to the tensor a ctx attribute holds.
"""

from __future__ import annotations

import functools
import types
from typing import Any, Iterator

from .. import _core

try:
    import torch
except ImportError:  # explain works on plain Python objects too
    torch = None

# Objects that hold nothing a walk could follow.
ATOMIC = (str, bytes, bytearray, int, float, complex, bool, type(None), range, types.ModuleType,
           types.CodeType, types.BuiltinFunctionType)


# What a walk follows from an object: (label, child) pairs.
Edges = Iterator[tuple[str, object]]

# Types whose edges gc does not see (the autograd graph): the walk asks edges() for them.
EXTRA_TYPES = (torch.Tensor, torch.autograd.graph.Node) if torch is not None else ()


def key_label(key: object) -> str:
    """A dict key as a path names it: an atom (or a tuple of them) as written, a long one cut; any
    other object by its type, a tensor with its shape (a parameter keying an optimizer's state),
    never its whole repr."""
    if isinstance(key, ATOMIC) or (isinstance(key, tuple) and all(isinstance(k, ATOMIC) for k in key)):
        text = repr(key)
        return text if len(text) <= 80 else text[:77] + "..."
    if torch is not None and isinstance(key, torch.Tensor):
        return f"<{type(key).__name__} {list(key.shape)}>"
    return f"<{type(key).__name__}>"


def edges(obj: Any) -> Edges:
    """Yields (label, child) for everything obj keeps alive."""
    if isinstance(obj, ATOMIC):
        return
    if torch is not None:
        if isinstance(obj, torch.Tensor):
            yield from _tensor_edges(obj)
            return
        if isinstance(obj, torch.autograd.graph.Node):
            yield from _node_edges(obj)
            return
        if isinstance(obj, torch.nn.Module):
            yield from _module_edges(obj)
            return
    if isinstance(obj, dict):
        for key, value in list(obj.items()):
            yield f"[{key_label(key)}]", value
            if not isinstance(key, ATOMIC):
                yield "<dict key>", key
        return
    if isinstance(obj, (list, tuple)):
        for i, value in enumerate(list(obj)):
            yield f"[{i}]", value
        return
    if isinstance(obj, (set, frozenset)):
        for value in list(obj):
            yield "<set member>", value
        return
    if isinstance(obj, types.MethodType):
        yield ".__self__", obj.__self__
        yield ".__func__", obj.__func__
        return
    if isinstance(obj, types.FunctionType):
        for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ()):
            try:
                yield f"<closure '{name}'>", cell.cell_contents
            except ValueError:  # an empty cell
                pass
        if obj.__defaults__:
            yield ".__defaults__", obj.__defaults__
        return
    if isinstance(obj, type):
        for name, value in list(vars(obj).items()):
            if not name.startswith("__"):
                yield f".{name}", value
        return
    if isinstance(obj, types.CellType):
        try:
            yield ".cell_contents", obj.cell_contents
        except ValueError:
            pass
        return
    if isinstance(obj, _LRU_CACHE):
        yield from _lru_cache_edges(obj)
        return
    if isinstance(obj, BaseException):
        yield from _exception_edges(obj)
        return
    if isinstance(obj, types.TracebackType):
        yield ".tb_frame", obj.tb_frame
        if obj.tb_next is not None:
            yield ".tb_next", obj.tb_next
        return
    if isinstance(obj, types.FrameType):
        yield from _frame_edges(obj)
        return
    if isinstance(obj, (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)):
        frame = getattr(obj, "gi_frame", None) or getattr(obj, "cr_frame", None) or getattr(obj, "ag_frame", None)
        if frame is not None:
            yield from _frame_edges(frame)
        return
    yield from _attribute_edges(obj)


_LRU_CACHE = type(functools.lru_cache(maxsize=None)(lambda: None))


def _lru_cache_edges(wrapper: Any) -> Edges:
    """functools.lru_cache keeps its results where only gc reaches: unbounded, in a dict {key:
    result}; bounded, in links that gc visits from the wrapper itself, each link's key then its
    result, before the wrapper's other references (CPython's lru_cache_tp_traverse)."""
    import gc

    name = getattr(wrapper, "__name__", "a function")
    yield ".__wrapped__", getattr(wrapper, "__wrapped__", None)
    referents = gc.get_referents(wrapper)
    own = getattr(wrapper, "__dict__", None)
    caches = [r for r in referents if isinstance(r, dict) and r is not own]
    if not caches:
        return
    cache = caches[0]
    if not any(type(v).__name__ == "_lru_list_elem" for v in cache.values()):
        for key, result in list(cache.items()):
            yield f"<lru_cache of {name}>[{key_label(key)}]", result
        return
    start = 1 if referents and isinstance(referents[0], type) else 0
    links = referents[start:start + 2 * len(cache)]
    for i in range(0, len(links) - 1, 2):
        yield f"<lru_cache of {name}>[{key_label(links[i])}]", links[i + 1]


def _exception_edges(e: BaseException) -> Edges:
    if e.__traceback__ is not None:
        yield ".__traceback__", e.__traceback__
    if e.__cause__ is not None:
        yield ".__cause__", e.__cause__
    if e.__context__ is not None:
        yield ".__context__", e.__context__
    yield ".args", e.args
    yield from _attribute_edges(e)


def frame_locals(frame: types.FrameType) -> dict[str, Any] | None:
    """A frame's locals, read without leaving anything on the frame: before Python 3.13, f_locals is
    a snapshot the frame keeps, holding what every local held when it was read for as long as the
    frame runs (a training loop's main(): the rest of the run). None for a module's frame, whose
    locals are its globals. A function's frame is read from its own slots; a class body's or an
    exec's locals are a mapping of their own, read as it is."""
    if frame.f_code.co_flags & _OPTIMIZED:
        return _core.frame_locals(frame)
    return None if frame.f_locals is frame.f_globals else dict(frame.f_locals)


_OPTIMIZED = 0x0001  # CO_OPTIMIZED: a function's frame, its locals in slots


def _frame_edges(frame: types.FrameType) -> Edges:
    try:
        local_values = frame_locals(frame) or {}
    except Exception:  # a frame being torn down
        local_values = {}
    for name, value in local_values.items():
        yield f".f_locals[{name!r}]", value
    if frame.f_back is not None:
        yield ".f_back", frame.f_back


def _attribute_edges(obj: object) -> Edges:
    d = getattr(obj, "__dict__", None)
    if isinstance(d, dict):
        for name, value in list(d.items()):
            yield f".{name}", value
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if isinstance(name, str) and name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                yield f".{name}", getattr(obj, name)
    if not isinstance(d, dict) and not hasattr(type(obj), "__slots__"):
        import gc

        for value in gc.get_referents(obj):  # a C-level container: no names to give
            if not isinstance(value, type):
                yield "<referent>", value


def _module_edges(module: Any) -> Edges:
    for group in ("_parameters", "_buffers", "_modules"):
        for name, value in list(getattr(module, group, {}).items()):
            if value is not None:
                yield f".{name}", value
    for name, value in list(vars(module).items()):
        # Never `and value`: a tensor's truth raises (more than one element) or is False (empty),
        # and then every edge of the module was lost.
        if name not in ("_parameters", "_buffers", "_modules") and not isinstance(value, ATOMIC):
            yield f".{name}", value


def _tensor_edges(t: Any) -> Edges:
    if t.grad_fn is not None:
        yield ".grad_fn", t.grad_fn
    if t.is_leaf and t.grad is not None:  # .grad of a non-leaf is always None, and warns
        yield ".grad", t.grad
    if t._base is not None:
        yield "._base", t._base
    hooks = getattr(t, "_backward_hooks", None)
    if hooks:
        yield "._backward_hooks", hooks
    d = getattr(t, "__dict__", None)
    if d:
        for name, value in list(d.items()):
            yield f".{name}", value


def _node_edges(node: Any) -> Edges:
    for i, (child, _) in enumerate(node.next_functions):
        if child is not None:
            yield f".next_functions[{i}][0]", child
    variable = getattr(node, "variable", None)  # AccumulateGrad: the leaf it accumulates into
    if variable is not None:
        yield ".variable", variable
    for name in dir(node):
        if name.startswith("_saved_"):
            try:
                value = getattr(node, name)
            except Exception:  # already freed by a backward, or not a tensor
                continue
            if value is not None:
                yield f".{name}", value
    # A custom Function's node is its ctx: what forward() kept on it, and what it saved.
    d = getattr(node, "__dict__", None)
    if d:
        for name, value in list(d.items()):
            yield f".{name}", value
    if isinstance(node, torch.autograd.function.BackwardCFunction):
        try:
            saved = node.saved_tensors
        except Exception:  # freed by backward
            saved = ()
        for i, value in enumerate(saved):
            yield f".saved_tensors[{i}]", value
