"""A C source compiled into a shared library and loaded, for the benchmarks that call the hook's
entry point from C (cc, or $CC; built in a per-user folder of the temp dir on every call, so a
changed source is never stale)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile


def c_library(name: str, source: str, flags: tuple[str, ...] = ()) -> ctypes.CDLL:
    build = os.path.join(tempfile.gettempdir(), f"vramscope_{name}_{os.getuid()}")
    os.makedirs(build, exist_ok=True)
    path, lib = os.path.join(build, f"{name}.c"), os.path.join(build, f"{name}.so")
    with open(path, "w") as f:
        f.write(source)
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", *flags, "-o", lib, path], check=True)
    return ctypes.CDLL(lib)
