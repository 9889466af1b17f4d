"""Who holds leaked memory: reference paths from a root through objects and the autograd graph."""

from typing import Any

from .leaks import owners_of_leaks, render_owners
from .paths import OwnerPath, describe_tensor, tensors_holding, who_holds

__all__ = ["OwnerPath", "describe_tensor", "explain", "owners_of_leaks", "render_owners", "tensors_holding",
           "who_holds"]


def explain(*, max_paths: int = 3, timeout: float = 5.0, quiet: bool = False) -> list[dict[str, Any]]:
    """Who holds each leak of the running (or last) capture, now: the trace so far is analysed,
    its leaks' live blocks mapped to tensors, and their owners found. Prints them unless quiet."""
    import json
    import sys

    from .. import _core
    from ..capture.session import last_capture

    capture = last_capture()
    if capture is None or capture.path is None:
        raise RuntimeError("vramscope.explain() needs a capture: run inside vramscope.track() or vramscope run")
    capture.flush()
    findings = json.loads(_core.analyze_json(capture.path, capture.settings, capture.device_memory))
    explained = owners_of_leaks(findings, max_paths=max_paths, timeout=timeout, device_type=capture.source.device_type)
    if not quiet:
        print(render_owners(explained) or "vramscope: no leak to explain", file=sys.stderr, end="", flush=True)
    return explained
