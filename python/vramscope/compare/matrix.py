"""What `vramscope compare` runs: a base command, its modes and the candidate fixes (variants),
from a TOML file or flags. Each cell is one mode × one variant; `baseline` (no variant) and `all`
(every variant together) are always rows.

    command = "python train.py"        # or a list; also given after `--` on the command line
    steps = 40                         # per-cell step limit (optional)
    timeout = "20m"                    # per-cell time limit (default 30m)
    device_memory = "24GiB"            # for the OOM projection (optional)
    project = "."                      # the tree the command runs in (default: where compare runs)

    [modes.vl]
    args = ["--mode", "vl"]            # appended to the command
    env = { SEQ_LEN = "512" }

    [variants.offload_sync]            # each key optional, any together
    label = "P3: OffloadActivations stream (TRL #5700)"
    patch = ["fixes/trl-5700.patch"]   # applied to a throwaway copy of `tree` (git apply)
    tree = "../trl"                    # default: the project; its copy goes first on PYTHONPATH
    import_root = "."                  # where the tree's packages are (default: src/ if there is one)
    preload = ["fixes/monkeypatch.py"] # imported before the script (a module name or a .py file)
    ref = "fix-branch"                 # the project at a git ref (git archive: the tree is untouched)
    env = { PYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True" }
    args = ["--no-compile"]
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import _core

BASELINE, ALL = "baseline", "all"
DEFAULT_TIMEOUT = 30 * 60.0
_VARIANT_KEYS = {"label", "patch", "tree", "import_root", "preload", "ref", "env", "args"}
_MODE_KEYS = {"args", "env"}


class MatrixError(ValueError):
    """A matrix that cannot be run as written; the message says where and why."""


@dataclass(frozen=True)
class Patch:
    file: str  # absolute
    tree: str  # absolute: the tree it applies to
    import_root: str = ""  # relative to the tree; "" for the tree itself


@dataclass(frozen=True)
class Variant:
    name: str
    label: str = ""
    env: tuple = ()  # ((key, value), ...)
    args: tuple = ()
    patches: tuple = ()  # Patch, in order
    preload: tuple = ()
    ref: str = ""

    def describe(self) -> list[str]:
        """What this variant changes, one item each, for the table's legend."""
        items = [f"{k}={v}" for k, v in self.env] + [f"args: {shlex.join(self.args)}"] * bool(self.args)
        items += [f"patch {os.path.basename(p.file)}" for p in self.patches]
        items += [f"preload {os.path.basename(m) if m.endswith('.py') else m}" for m in self.preload]
        items += [f"ref {self.ref}"] * bool(self.ref)
        return items


@dataclass(frozen=True)
class Mode:
    name: str
    env: tuple = ()
    args: tuple = ()


@dataclass(frozen=True)
class Cell:
    mode: Mode
    variant: Variant

    @property
    def key(self) -> str:
        return f"{self.mode.name}/{self.variant.name}"

    def fingerprint(self, matrix: "Matrix") -> str:
        """Same fingerprint, same run: what --resume trusts a finished cell by."""
        spec = {"command": matrix.command, "steps": matrix.steps, "mode": asdict(self.mode),
                "variant": asdict(self.variant), "device_memory": matrix.device_memory,
                "patches": [hashlib.sha256(Path(p.file).read_bytes()).hexdigest() for p in self.variant.patches]}
        return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class Matrix:
    command: list[str]
    project: str
    modes: list[Mode] = field(default_factory=lambda: [Mode("default")])
    variants: list[Variant] = field(default_factory=list)
    steps: int = 0
    timeout: float = DEFAULT_TIMEOUT
    device_memory: int = 0

    def rows(self) -> list[Variant]:
        """baseline, each variant, then all of them together (when there are two or more, and they
        can be combined: see why_no_all)."""
        rows = [Variant(BASELINE, "no change"), *self.variants]
        if len(self.variants) >= 2:
            try:
                rows.append(combined(self.variants))
            except MatrixError:
                pass  # why_no_all() says why
        return rows

    def why_no_all(self) -> str:
        try:
            combined(self.variants)
        except MatrixError as e:
            return str(e)
        return ""

    def cells(self) -> list[Cell]:
        return [Cell(mode, variant) for mode in self.modes for variant in self.rows()]


def combined(variants: list[Variant]) -> Variant:
    """Every variant at once: environments merged (a key set two ways is an error), arguments,
    patches and preloads in the order given, at most one git ref."""
    env: dict[str, str] = {}
    for v in variants:
        for key, value in v.env:
            if env.get(key, value) != value:
                raise MatrixError(f"variants set {key} two ways ({env[key]!r}, {value!r}): `all` cannot combine them")
            env[key] = value
    refs = {v.ref for v in variants if v.ref}
    if len(refs) > 1:
        raise MatrixError(f"variants name different git refs ({', '.join(sorted(refs))}): `all` cannot combine them")
    return Variant(ALL, "all variants together", tuple(env.items()), sum((v.args for v in variants), ()),
                   sum((v.patches for v in variants), ()), sum((v.preload for v in variants), ()),
                   next(iter(refs), ""))


def _strings(value, where: str) -> tuple:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise MatrixError(f"{where}: expected a string or a list of strings, got {value!r}")


def _args(value, where: str) -> tuple:
    return tuple(shlex.split(value)) if isinstance(value, str) else _strings(value, where)


def _env(value, where: str) -> tuple:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float))
                                             for k, v in value.items()):
        raise MatrixError(f"{where}: expected a table of NAME = \"value\", got {value!r}")
    return tuple((k, str(v)) for k, v in value.items())


def _name(name: str, where: str) -> str:
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name in (BASELINE, ALL):
        raise MatrixError(f"{where}: {name!r} cannot name a row or mode (letters, digits, - _ . only; "
                          f"'{BASELINE}' and '{ALL}' are implicit)")
    return name


def _path(base: Path, value: str, where: str, *, is_dir: bool) -> str:
    path = (base / os.path.expanduser(value)).resolve()
    if not (path.is_dir() if is_dir else path.is_file()):
        raise MatrixError(f"{where}: {path} is not {'a directory' if is_dir else 'a file'}")
    return str(path)


def _variant(name: str, spec: dict, base: Path, project: str) -> Variant:
    where = f"variants.{name}"
    unknown = set(spec) - _VARIANT_KEYS
    if unknown:
        raise MatrixError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(_VARIANT_KEYS))})")
    tree = _path(base, spec["tree"], f"{where}.tree", is_dir=True) if "tree" in spec else project
    if "import_root" in spec:
        import_root = spec["import_root"]
    else:  # a src/ layout imports from src/; the project's own copy is the command's directory
        import_root = "src" if tree != project and Path(tree, "src").is_dir() else ""
    patches = tuple(Patch(_path(base, p, f"{where}.patch", is_dir=False), tree, import_root)
                    for p in _strings(spec.get("patch", []), f"{where}.patch"))
    preload = tuple(m if not m.endswith(".py") else _path(base, m, f"{where}.preload", is_dir=False)
                    for m in _strings(spec.get("preload", []), f"{where}.preload"))
    variant = Variant(_name(name, where), str(spec.get("label", "")), _env(spec.get("env", {}), f"{where}.env"),
                      _args(spec.get("args", []), f"{where}.args"), patches, preload, str(spec.get("ref", "")))
    if not variant.describe():
        raise MatrixError(f"{where}: changes nothing (give env, args, patch, preload or ref)")
    return variant


def _mode(name: str, spec: dict) -> Mode:
    where = f"modes.{name}"
    unknown = set(spec) - _MODE_KEYS
    if unknown:
        raise MatrixError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: args, env)")
    return Mode(_name(name, where), _env(spec.get("env", {}), f"{where}.env"), _args(spec.get("args", []), f"{where}.args"))


def _seconds(value, where: str) -> float:
    if isinstance(value, (int, float)) and value > 0:
        return float(value)
    units = {"s": 1, "m": 60, "h": 3600}
    text = str(value).strip()
    try:
        seconds = float(text[:-1]) * units[text[-1]] if text[-1:] in units else float(text)
    except (ValueError, KeyError):
        seconds = -1
    if seconds <= 0:
        raise MatrixError(f"{where}: {value!r} is not a duration (e.g. 600, \"90s\", \"20m\", \"1h\")")
    return seconds


def from_dict(spec: dict, base: Path, command: list[str] | None = None) -> Matrix:
    """A matrix from its TOML table (paths relative to `base`); `command` from `--` wins."""
    known = {"command", "steps", "timeout", "device_memory", "project", "modes", "variants"}
    unknown = set(spec) - known
    if unknown:
        raise MatrixError(f"unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))})")
    command = command or list(_args(spec.get("command", []), "command"))
    if not command:
        raise MatrixError("no command: give `command = \"python train.py\"` or `-- python train.py`")
    project = _path(base, spec.get("project", "."), "project", is_dir=True)
    steps = spec.get("steps", 0)
    if not isinstance(steps, int) or steps < 0:
        raise MatrixError(f"steps: {steps!r} is not a number of steps")
    try:
        device_memory = _core.parse_bytes(str(spec["device_memory"])) if "device_memory" in spec else 0
    except ValueError as e:
        raise MatrixError(f"device_memory: {e}") from None
    for table in ("modes", "variants"):
        if not isinstance(spec.get(table, {}), dict) or not all(isinstance(v, dict) for v in spec.get(table, {}).values()):
            raise MatrixError(f"{table}: expected tables, as [{table}.NAME]")
    modes = [_mode(n, m) for n, m in spec.get("modes", {}).items()] or [Mode("default")]
    variants = [_variant(n, v, base, project) for n, v in spec.get("variants", {}).items()]
    return Matrix(command, project, modes, variants, steps, _seconds(spec.get("timeout", DEFAULT_TIMEOUT), "timeout"),
                  device_memory)


def read(path: str | os.PathLike) -> dict:
    """A matrix file's table, before from_dict() checks it."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        try:
            import tomli as tomllib
        except ImportError:
            raise MatrixError("reading a matrix file needs Python 3.11+ or the tomli package; "
                              "or give the matrix as flags (--variant, --mode)") from None
    try:
        return tomllib.loads(Path(path).read_text())
    except OSError as e:
        raise MatrixError(f"{path}: {e.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise MatrixError(f"{path}: not TOML: {e}") from None


def merge_flags(spec: dict, flags: dict) -> dict:
    """Flags over a file's table: a variant or mode named again gains what the flags add."""
    merged = {**spec, **{k: v for k, v in flags.items() if k not in ("variants", "modes")}}
    for table in ("variants", "modes"):
        for name, extra in flags.get(table, {}).items():
            merged.setdefault(table, {})
            merged[table][name] = {**merged[table].get(name, {}), **extra}
    return merged


def flag_spec(spec: dict, kind: str, text: str) -> None:
    """One `--variant NAME=KIND:VALUE` or `--mode NAME=KIND:VALUE` (a bare `--mode NAME=ARGS` is
    arguments) added to a matrix table; the same NAME given again adds to it."""
    name, sep, rest = text.partition("=")
    if not sep or not name:
        raise MatrixError(f"--{kind} {text!r}: expected NAME=KIND:VALUE (e.g. fix1=patch:fix1.patch)")
    table = spec.setdefault(f"{kind}s", {}).setdefault(name, {})
    key, colon, value = rest.partition(":")
    if kind == "mode" and (not colon or key not in _MODE_KEYS):
        key, value = "args", rest
    if key == "env":
        env_key, eq, env_value = value.partition("=")
        if not eq or not env_key:
            raise MatrixError(f"--{kind} {text!r}: env wants NAME=env:KEY=VALUE")
        table.setdefault("env", {})[env_key] = env_value
    elif key == "args":
        table["args"] = [*table.get("args", []), *shlex.split(value)]
    elif key in ("patch", "preload"):
        table[key] = [*table.get(key, []), value]
    elif key in ("ref", "tree", "label", "import_root"):
        table[key] = value
    else:
        raise MatrixError(f"--{kind} {text!r}: unknown kind {key!r} (env, args, patch, preload, ref, tree, label)")
