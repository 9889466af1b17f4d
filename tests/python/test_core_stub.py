"""The native module's stub (python/vramscope/_core.pyi) is the module as built, and every call the
package makes into it binds to the stub's signature: a binding changed in C++ without its Python
callers (an argument too many, one renamed) fails here, not in a user's run."""

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent.parent / "python" / "vramscope"
STUB = PACKAGE / "_core.pyi"


def test_the_stub_is_the_module_as_built(tmp_path):
    pytest.importorskip("nanobind")
    out = tmp_path / "_core.pyi"
    subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "vramscope._core", "-o", str(out)], check=True)
    assert out.read_text() == STUB.read_text(), (
        "python/vramscope/_core.pyi is stale: python3 -m nanobind.stubgen -m vramscope._core -o python/vramscope/_core.pyi")


def stub_signatures() -> dict[str, inspect.Signature]:
    """The stub's module-level functions and classes (their __init__), as signatures to bind calls to."""
    out = {}
    for node in ast.parse(STUB.read_text()).body:
        function = node
        if isinstance(node, ast.ClassDef):
            inits = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
            if not inits:
                continue
            function = inits[0]
        elif not isinstance(node, ast.FunctionDef):
            continue
        a = function.args
        params = [inspect.Parameter(p.arg, inspect.Parameter.POSITIONAL_ONLY) for p in a.posonlyargs]
        params += [inspect.Parameter(p.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in a.args]
        if isinstance(node, ast.ClassDef):
            params = params[1:]  # self
        defaults = len(a.defaults)
        for i in range(len(params) - defaults, len(params)):
            params[i] = params[i].replace(default=None)
        params += [inspect.Parameter(p.arg, inspect.Parameter.KEYWORD_ONLY, default=None if d is not None else
                                     inspect.Parameter.empty) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
        if node.name not in out:  # an overload's first form
            out[node.name] = inspect.Signature(params)
    return out


def core_calls():
    """(file, line, name, call) for each call of `_core.NAME(...)` or of a name imported from _core."""
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.endswith("_core"):
                aliases.update({n.asname or n.name: n.name for n in node.names})
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "_core":
                yield path, node.lineno, f.attr, node
            elif isinstance(f, ast.Name) and f.id in aliases:
                yield path, node.lineno, aliases[f.id], node


def test_every_call_into_the_native_module_binds_to_its_stub():
    signatures = stub_signatures()
    checked = 0
    for path, line, name, call in core_calls():
        if name not in signatures:
            continue  # an attribute the stub has as a value or a class without __init__
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            continue
        try:
            signatures[name].bind(*range(len(call.args)), **{k.arg: 0 for k in call.keywords})
        except TypeError as e:
            pytest.fail(f"{path.relative_to(PACKAGE.parent)}:{line}: _core.{name}(...) does not fit the module: {e}")
        checked += 1
    assert checked >= 20
