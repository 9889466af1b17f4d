"""Started by vramscope_run.pth in every Python process of a `vramscope run` (VRAMSCOPE_RUN set).

It waits for torch to be imported, then starts a capture that attaches when (if) the process
initialises CUDA: the launcher's own torchrun process, DataLoader workers and compile workers
never do, and write nothing.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import json
import os
import sys


def _start(config: dict) -> None:
    from .capture.session import Capture

    launched_directly = os.getppid() == config.get("launcher")
    capture = Capture(config["output"], summary=False, device_memory=config.get("device_memory", 0),
                      shared_name=launched_directly, analyse_at_end=False)
    capture.start()
    atexit.register(capture.stop)


class _AfterTorchImport(importlib.abc.MetaPathFinder):
    def __init__(self, config: dict):
        self.config = config

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module
        config = self.config

        def exec_then_start(module):
            exec_module(module)
            try:
                _start(config)
            except Exception as e:
                print(f"vramscope: capture could not start ({e}); the run goes on without it", file=sys.stderr)

        spec.loader.exec_module = exec_then_start
        return spec


def _install() -> None:
    try:
        config = json.loads(os.environ["VRAMSCOPE_RUN"])
    except (KeyError, ValueError) as e:
        print(f"vramscope: ignoring a malformed VRAMSCOPE_RUN ({e})", file=sys.stderr)
        return
    if "torch" in sys.modules:
        _start(config)
    else:
        sys.meta_path.insert(0, _AfterTorchImport(config))


_install()
