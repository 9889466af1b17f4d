"""What `vramscope compare` runs: a base command, its modes and the candidate fixes (variants),
from a TOML file or flags. Each cell is one mode × one variant; `baseline` (no variant) and `all`
(every variant together) are always rows.

    command = "python train.py"        # or a list; also given after `--` on the command line
    max_steps = 40                     # each cell ends cleanly after this step (optional)
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
import math
import os
import re
import shlex
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import _core

BASELINE, ALL = "baseline", "all"
DEFAULT_TIMEOUT = 30 * 60.0
MAX_TIMEOUT = 30 * 24 * 3600.0  # longer is a typo, not a time limit
MAX_STEPS = 2**32 - 1  # the last step `analyze --steps` can name
MAX_JOBS = 1024
MAX_MATRIX_BYTES = 1 << 20
# A mode's or row's name is a folder of its own, OUT/cells/MODE/ROW: ASCII letters and digits
# first, so never empty, '.', '..', a leading '-' or a name of dots; no '/', '\', NUL or control
# character anywhere; short enough for any filesystem.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
_WHOLE = re.compile(r"[0-9]{1,20}")  # ASCII digits only: '²'.isdigit() and float('٣') say yes
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([smh]?)")
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
    env: tuple[tuple[str, str], ...] = ()
    args: tuple[str, ...] = ()
    patches: tuple[Patch, ...] = ()  # in order
    preload: tuple[str, ...] = ()
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
    env: tuple[tuple[str, str], ...] = ()
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cell:
    mode: Mode
    variant: Variant

    @property
    def key(self) -> str:
        return f"{self.mode.name}/{self.variant.name}"

    def fingerprint(self, matrix: "Matrix") -> str:
        """Same fingerprint, same run: what --resume trusts a finished cell by."""
        spec = {"command": matrix.command, "max_steps": matrix.max_steps, "mode": asdict(self.mode),
                "variant": asdict(self.variant), "device_memory": matrix.device_memory,
                "patches": [hashlib.sha256(Path(p.file).read_bytes()).hexdigest() for p in self.variant.patches]}
        return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class Matrix:
    command: list[str]
    project: str
    modes: list[Mode] = field(default_factory=lambda: [Mode("default")])
    variants: list[Variant] = field(default_factory=list)
    max_steps: int = 0  # 0: the command ends when it ends
    timeout: float = DEFAULT_TIMEOUT
    device_memory: int = 0
    source: str = ""  # the matrix file, if any

    def inputs(self) -> list[str]:
        """The files a run reads (which no output may overwrite)."""
        files = [self.source] * bool(self.source) + [p.file for v in self.variants for p in v.patches]
        return files + [m for v in self.variants for m in v.preload if m.endswith(".py")]

    def trees(self) -> list[str]:
        """The folders a run reads from (which no output may replace)."""
        return [self.project, *{p.tree for v in self.variants for p in v.patches}]

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


def _text(value: object, where: str) -> str:
    """A string that can reach a command line, an environment or a path: NUL cannot."""
    if not isinstance(value, str):
        raise MatrixError(f"{where}: expected a string, got {value!r}")
    if "\0" in value:
        raise MatrixError(f"{where}: {value!r} holds a NUL byte")
    return value


def _strings(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(_text(v, where) for v in value)
    return (_text(value, where),)


def split(text: str, where: str) -> list[str]:
    """Words of a string as a shell splits them."""
    try:
        return shlex.split(_text(text, where))
    except ValueError as e:  # an unclosed quote, a trailing escape
        raise MatrixError(f"{where}: {text!r} cannot be split into words ({e})") from None


def _args(value: object, where: str) -> tuple[str, ...]:
    return tuple(split(value, where)) if isinstance(value, str) else _strings(value, where)


def _env(value: object, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise MatrixError(f"{where}: expected a table of NAME = \"value\", got {value!r}")
    env: list[tuple[str, str]] = []
    for key, v in value.items():
        if not key or "=" in key or "\0" in key:
            raise MatrixError(f"{where}: {key!r} cannot name an environment variable")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise MatrixError(f"{where}.{key}: expected a string or a number, got {v!r}")
        env.append((key, _text(str(v), f"{where}.{key}")))
    return tuple(env)


def whole_number(value: object, where: str, maximum: int) -> int:
    """0 to maximum, from an integer or a string of ASCII digits; never a bool."""
    if isinstance(value, str) and _WHOLE.fullmatch(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise MatrixError(f"{where}: {value!r} is not a whole number from 0 to {maximum}")
    return value


def check_name(name: object, where: str) -> str:
    """The one rule for a mode's or row's name (NAME): it becomes a folder, so it can never spell or
    leave a path. The implicit rows' names are refused in any case, as a case-insensitive
    filesystem would give them one folder."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or name.lower() in (BASELINE, ALL):
        raise MatrixError(f"{where}: {name!r} cannot name a row or mode (1 to 64 of A-Z a-z 0-9 . _ + -, a letter "
                          f"or digit first; '{BASELINE}' and '{ALL}' are implicit)")
    return name


def _distinct(names: list[str], table: str) -> None:
    seen: dict[str, str] = {}
    for name in names:
        if name.lower() in seen:
            raise MatrixError(f"{table}: {seen[name.lower()]!r} and {name!r} differ only in case, and would share "
                              "a folder on a case-insensitive filesystem")
        seen[name.lower()] = name


def _path(base: Path, value: object, where: str, *, is_dir: bool) -> str:
    try:
        path = (base / os.path.expanduser(_text(value, where))).resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop
        raise MatrixError(f"{where}: {value!r} cannot be resolved ({e})") from None
    if not (path.is_dir() if is_dir else path.is_file()):
        raise MatrixError(f"{where}: {path} is not {'a directory' if is_dir else 'a file'}")
    return str(path)


def _variant(name: str, spec: dict[str, Any], base: Path, project: str) -> Variant:
    where = f"variants.{check_name(name, 'variants')}"  # checked first: the name is in every message
    unknown = set(spec) - _VARIANT_KEYS
    if unknown:
        raise MatrixError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(_VARIANT_KEYS))})")
    tree = _path(base, spec["tree"], f"{where}.tree", is_dir=True) if "tree" in spec else project
    if "import_root" in spec:
        import_root = _text(spec["import_root"], f"{where}.import_root")
    else:  # a src/ layout imports from src/; the project's own copy is the command's directory
        import_root = "src" if tree != project and Path(tree, "src").is_dir() else ""
    patches = tuple(Patch(_path(base, p, f"{where}.patch", is_dir=False), tree, import_root)
                    for p in _strings(spec.get("patch", []), f"{where}.patch"))
    preload = tuple(m if not m.endswith(".py") else _path(base, m, f"{where}.preload", is_dir=False)
                    for m in _strings(spec.get("preload", []), f"{where}.preload"))
    ref = _text(spec.get("ref", ""), f"{where}.ref")
    if ref.startswith("-") or not ref.isprintable():
        raise MatrixError(f"{where}.ref: {ref!r} is not a git ref")  # git would read '-...' as an option
    variant = Variant(name, _text(spec.get("label", ""), f"{where}.label"),
                      _env(spec.get("env", {}), f"{where}.env"), _args(spec.get("args", []), f"{where}.args"),
                      patches, preload, ref)
    if not variant.describe():
        raise MatrixError(f"{where}: changes nothing (give env, args, patch, preload or ref)")
    return variant


def _mode(name: str, spec: dict[str, Any]) -> Mode:
    where = f"modes.{check_name(name, 'modes')}"
    unknown = set(spec) - _MODE_KEYS
    if unknown:
        raise MatrixError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: args, env)")
    return Mode(name, _env(spec.get("env", {}), f"{where}.env"), _args(spec.get("args", []), f"{where}.args"))


def seconds(value: object, where: str) -> float:
    """A time limit: a number of seconds or a string such as "90s", "20m", "1h"; finite, above 0,
    at most MAX_TIMEOUT (nan and inf would never fire; true is not 1 s)."""
    units = {"": 1, "s": 1, "m": 60, "h": 3600}
    number = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str) and (match := _DURATION.fullmatch(value.strip())):
        number = float(match[1]) * units[match[2]]
    if number is None or not (math.isfinite(number) and 0 < number <= MAX_TIMEOUT):
        raise MatrixError(f"{where}: {value!r} is not a duration from 1 s to {MAX_TIMEOUT / 86400:.0f} days "
                          "(e.g. 600, \"90s\", \"20m\", \"1h\")")
    return number


def from_dict(spec: dict[str, Any], base: Path, command: list[str] | None = None) -> Matrix:
    """A matrix from its TOML table (paths relative to `base`); `command` from `--` wins."""
    known = {"command", "max_steps", "timeout", "device_memory", "project", "modes", "variants"}
    unknown = set(spec) - known
    if unknown:
        raise MatrixError(f"unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))})")
    command = list(_strings(command, "command")) if command else list(_args(spec.get("command", []), "command"))
    if not command:
        raise MatrixError("no command: give `command = \"python train.py\"` or `-- python train.py`")
    project = _path(base, spec.get("project", "."), "project", is_dir=True)
    max_steps = whole_number(spec.get("max_steps", 0), "max_steps", MAX_STEPS)
    device_memory = 0
    if "device_memory" in spec:
        size = spec["device_memory"]
        if not isinstance(size, str):
            raise MatrixError(f"device_memory: expected a size such as \"24GiB\", got {size!r}")
        try:  # the rule `analyze --device-memory` applies, the one there is
            device_memory = _core.parse_options("analyze", [("--device-memory", _text(size, "device_memory"))]).device_memory
        except ValueError as e:
            raise MatrixError(f"device_memory: {e}") from None
    for table in ("modes", "variants"):
        _table(spec, table)
    modes = [_mode(n, m) for n, m in spec.get("modes", {}).items()] or [Mode("default")]
    variants = [_variant(n, v, base, project) for n, v in spec.get("variants", {}).items()]
    _distinct([m.name for m in modes], "modes")
    _distinct([v.name for v in variants], "variants")
    return Matrix(command, project, modes, variants, max_steps, seconds(spec.get("timeout", DEFAULT_TIMEOUT), "timeout"),
                  device_memory)


def _table(spec: dict[str, Any], table: str) -> dict[str, Any]:
    """[modes.NAME] or [variants.NAME]: a table of tables."""
    value = spec.get(table, {})
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise MatrixError(f"{table}: expected tables, as [{table}.NAME]")
    return value


def read(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A matrix file's table, before from_dict() checks it."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        try:
            import tomli as tomllib  # type: ignore[no-redef]  # the same module, before Python 3.11
        except ImportError:
            raise MatrixError("reading a matrix file needs Python 3.11+ or the tomli package; "
                              "or give the matrix as flags (--variant, --mode)") from None
    try:
        return tomllib.loads(_read_regular_file(path, MAX_MATRIX_BYTES).decode())
    except OSError as e:
        raise MatrixError(f"{path}: {e.strerror or e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise MatrixError(f"{path}: not TOML: {e}") from None
    except RecursionError:
        raise MatrixError(f"{path}: not TOML: nested too deeply") from None


def _read_regular_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """A regular file of at most `limit` bytes: a FIFO or a device may never end (opened without
    blocking, so a FIFO with no writer cannot hang the open either)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file (a pipe or device may never end; save it to a file first)")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(f"over {limit >> 20} MiB: not a matrix")
    return data


def merge_flags(spec: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """Flags over a file's table: a variant or mode named again gains what the flags add."""
    merged = {**spec, **{k: v for k, v in flags.items() if k not in ("variants", "modes")}}
    for table in ("variants", "modes"):
        if table in flags:
            merged[table] = {**_table(spec, table)}
        for name, extra in flags.get(table, {}).items():
            merged[table][name] = {**merged[table].get(name, {}), **extra}
    return merged


def flag_spec(spec: dict[str, Any], kind: str, text: str) -> None:
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
        table["args"] = [*table.get("args", []), *split(value, f"--{kind} {name}")]
    elif key in ("patch", "preload"):
        table[key] = [*table.get(key, []), value]
    elif key in ("ref", "tree", "label", "import_root"):
        table[key] = value
    else:
        raise MatrixError(f"--{kind} {text!r}: unknown kind {key!r} (env, args, patch, preload, ref, tree, label)")
