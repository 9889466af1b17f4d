"""Builds and loads the allocator hook (allocator_hook.cpp) against the user's own torch.

torch.utils.cpp_extension compiles it once per torch version and caches it (~/.cache/torch_extensions);
later runs load it in a fraction of a second.
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("allocator_hook.cpp")
# events/event.h, the event vocabulary the hook speaks: installed with the package, or the source tree's.
_INCLUDE = next((p for p in (Path(__file__).parents[1] / "include", Path(__file__).parents[3] / "src" / "vramscope")
                 if (p / "events" / "event.h").exists()), None)


class HookUnavailable(RuntimeError):
    """The hook cannot be built or loaded here; the message says why and what to do."""


def load_allocator_hook() -> Any:
    import torch
    from torch.utils import cpp_extension

    if cpp_extension.CUDA_HOME is None:
        raise HookUnavailable("the CUDA toolkit headers were not found (set CUDA_HOME to the CUDA install)")
    if _INCLUDE is None:
        raise HookUnavailable("vramscope's events/event.h is missing from the installation (reinstall vramscope)")
    # One build per torch version and per hook source: a hook built against another torch would not
    # load, or worse; one built from other sources would speak another vocabulary.
    sources = hashlib.sha1(SOURCE.read_bytes() + (_INCLUDE / "events" / "event.h").read_bytes()).hexdigest()[:10]
    name = "vramscope_allocator_hook_" + re.sub(r"\W", "_", torch.__version__) + "_" + sources
    first_use = not _cached(cpp_extension, name)
    if first_use:
        print(f"vramscope: building the allocator hook for torch {torch.__version__} (first use only)...",
              file=sys.stderr, flush=True)
    try:
        return cpp_extension.load(name=name, sources=[str(SOURCE)], with_cuda=True, extra_include_paths=[str(_INCLUDE)],
                                  extra_cflags=["-O2"], verbose=False)
    except Exception as e:  # compiler missing, ninja missing, headers of another torch
        text = str(e).strip().splitlines()
        raise HookUnavailable(f"the allocator hook could not be built or loaded: {text[-1] if text else type(e).__name__}"
                              " (building it needs a C++ compiler and ninja: pip install ninja)") from e


def _cached(cpp_extension: Any, name: str) -> bool:
    try:
        root = Path(cpp_extension._get_build_directory(name, verbose=False))
    except Exception:
        return False
    return any(root.glob("*.so"))
