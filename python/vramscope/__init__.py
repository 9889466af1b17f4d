"""vramscope: find, explain and prevent GPU memory leaks in PyTorch training."""

from __future__ import annotations

import json
import os
from typing import Any

from . import _core
# nanobind's stubgen leaves dunder attributes out of _core.pyi; the module sets it (src/python/module.cpp).
from ._core import __version__  # type: ignore[attr-defined]
from ._core import analyze_json as _analyze_json, convert
from .capture import Capture, LeakError, mark, step, track
from .prevent import CannotJudgeError, LeakCheck, PeakError, assert_no_leak

__all__ = ["__version__", "CannotJudgeError", "Capture", "LeakCheck", "LeakError", "PeakError", "analyze", "assert_no_leak",
           "convert", "explain", "mark", "step", "track", "who_holds"]


def __getattr__(name: str) -> Any:
    # Ownership imports torch; `import vramscope` must not (vramscope run imports it before torch).
    if name in ("who_holds", "explain"):
        import importlib

        return getattr(importlib.import_module("vramscope.owners"), name)
    raise AttributeError(f"module 'vramscope' has no attribute {name!r}")


def analyze(path: str | os.PathLike[str], *, window: int | None = None, warmup: int | None = None,
            device_memory: int = 0) -> dict[str, Any]:
    """Analyse a .vscope trace or torch memory snapshot and return the findings (docs/findings.md).
    window, warmup: the judge's (JudgeSettings); None: its defaults. Out of range raises ValueError."""
    settings = _core.JudgeSettings()
    if window is not None:
        settings.window = window
    if warmup is not None:
        settings.warmup = warmup
    settings.check()
    findings: dict[str, Any] = json.loads(_analyze_json(os.fspath(path), settings, device_memory))
    return findings
