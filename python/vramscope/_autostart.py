"""Started by vramscope_run.pth in every Python process of a `vramscope run` (VRAMSCOPE_RUN set).

It waits for torch to be imported, then starts a capture that attaches when (if) the process
initialises CUDA: the launcher's own torchrun process, DataLoader workers and compile workers
never do, and write nothing. Without CUDA the capture records live tensors, in the first process
of each rank only.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import types
from typing import Any, Sequence


# Set by the process that records live tensors, to its rank: the processes it starts inherit it.
_LIVE_TENSORS_RECORDED = "VRAMSCOPE_LIVE_TENSORS_RECORDED"


def _first_to_record_live_tensors() -> bool:
    """Without CUDA every process of the run that imports torch could record the tensors it makes; the
    first one of each rank does (the command's own process, each torchrun or Lightning rank), not the
    processes it starts (DataLoader and compile workers), whose traces would hold no steps, or under
    torchrun take their rank's file name."""
    rank = f"{os.environ.get('RANK', '')}/{os.environ.get('LOCAL_RANK', '')}"
    if os.environ.get(_LIVE_TENSORS_RECORDED) == rank:
        return False
    os.environ[_LIVE_TENSORS_RECORDED] = rank
    return True


def _start(config: dict[str, Any]) -> None:
    """The capture started; one that cannot start leaves the run to go on without it."""
    try:
        from .capture.session import Capture, Source

        source = Source.here()
        if source is Source.live_tensors and not _first_to_record_live_tensors():
            return
        launched_directly = os.getppid() == config.get("launcher")
        options = {"device_memory": config.get("device_memory", 0), "shared_name": launched_directly,
                   "warmup": config.get("warmup", -1), "source": source}
        if config.get("armed", 0):  # each window is analysed here, as it ends: no launcher waits for it
            from .capture.armed import Armed

            Armed(config["output"], config["armed"], options).arm()
            return
        capture = Capture(config["output"], summary=False, analyse_at_end=False, max_steps=config.get("max_steps", 0),
                          **options)
        capture.start()
        atexit.register(capture.stop)
    except Exception as e:
        print(f"vramscope: capture could not start ({e}); the run goes on without it", file=sys.stderr)


class _AfterTorchImport(importlib.abc.MetaPathFinder):
    def __init__(self, config: dict[str, Any]):
        self.config = config

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module
        config = self.config

        def exec_then_start(module: types.ModuleType) -> None:
            exec_module(module)
            _start(config)

        spec.loader.exec_module = exec_then_start  # type: ignore[method-assign]  # the loader is torch's, wrapped once
        return spec


def _preload(modules: list[str]) -> None:
    """The modules a run asked for before its script (a monkeypatch under test in `vramscope
    compare`): a name on sys.path, or a .py file. One that fails ends the process, as the run
    without it would not be the run asked for."""
    import runpy
    import traceback

    for module in modules:
        try:
            if module.endswith(".py"):
                runpy.run_path(module, run_name=os.path.basename(module)[:-3])
            else:
                importlib.import_module(module)
        except BaseException:
            traceback.print_exc()
            print(f"vramscope: the preloaded module {module} failed (above); the run stops", file=sys.stderr,
                  flush=True)
            os._exit(3)  # an exception here would only be printed by site.py, and the run go on


# What `vramscope run` puts in VRAMSCOPE_RUN (launch.run_environment): each key's type.
_CONFIG = {"output": str, "launcher": int, "device_memory": int, "max_steps": int, "warmup": int, "preload": list,
           "armed": int}


def _config(text: str) -> dict[str, Any]:
    """VRAMSCOPE_RUN read and checked: any other shape is a ValueError saying what is wrong, as this
    runs in every Python process of the environment and must never fail one."""
    config = json.loads(text)
    if not isinstance(config, dict) or "output" not in config:
        raise ValueError("not an object with an output")
    for key, kind in _CONFIG.items():
        value = config.get(key, kind())
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"{key} is not {kind.__name__}")
    if config.get("warmup", -1) < -1:
        raise ValueError("warmup is below -1")
    if config.get("armed", 0) < 0:
        raise ValueError("armed is below 0")
    if not all(isinstance(m, str) for m in config.get("preload", [])):
        raise ValueError("preload is not a list of module names")
    return config


def _install() -> None:
    try:
        config = _config(os.environ["VRAMSCOPE_RUN"])
    except (KeyError, ValueError, RecursionError) as e:
        print(f"vramscope: ignoring a malformed VRAMSCOPE_RUN ({e}); this process runs without capture",
              file=sys.stderr)
        return
    _preload(config.get("preload", []))
    if "torch" in sys.modules:
        _start(config)
    else:
        sys.meta_path.insert(0, _AfterTorchImport(config))


_install()
