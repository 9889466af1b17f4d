"""Runs the cells of a matrix, each in a fresh process under live capture: one GPU per cell
(CUDA_VISIBLE_DEVICES) with a queue when there are more cells than GPUs, or a launcher prefix per
cell (srun ...). Each cell's trace, log, findings and report stay in OUT/cells/MODE/VARIANT/;
cell.json says how it ended and is what --resume trusts."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from .. import _core
from ..capture import naming
from ..launch import run_environment, why_no_trace
from .isolation import SetupError, prepare
from .matrix import BASELINE, Cell, Matrix
from .outputs import write_atomic

if TYPE_CHECKING:
    from . import Progress

# How a cell's process ended; the C++ side (compare/cells.h) reads these spellings. ERROR: vramscope
# itself failed on the cell (its reason says how); the run goes on without it.
FINISHED, FAILED, OUT_OF_MEMORY, TIMED_OUT, NOT_RUN, INTERRUPTED, ERROR = (
    "finished", "failed", "out-of-memory", "timed-out", "not-run", "interrupted", "error")
_OOM_MARKS = ("torch.OutOfMemoryError", "CUDA out of memory")  # torch's words, and vramscope's at an OOM
_GRACE_SECONDS = 20  # after SIGTERM, for the cell to write its trace's end


@dataclass
class Options:
    out: Path
    gpus: list[str | None]  # one slot each: CUDA_VISIBLE_DEVICES for its cells, or None (unpinned: one at a time, or --jobs)
    launcher: list[str]
    resume: bool = False
    keep_trees: bool = False


def visible_gpus() -> list[str | None]:
    """The GPUs cells may use: CUDA_VISIBLE_DEVICES if set, else those nvidia-smi lists."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g.strip() for g in visible.split(",") if g.strip()] or [None]
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return [None]
    return [str(i) for i, line in enumerate(l for l in listed.splitlines() if l.startswith("GPU "))] or [None]


class CellPathError(RuntimeError):
    """A cell's folder that would not be OUT/cells/MODE/ROW itself (a link on the way)."""


def cell_dir(out: Path, cell: Cell) -> Path:
    """OUT/cells/MODE/ROW, resolved and checked to be exactly that: the runner removes it before a
    run, so nothing that leads elsewhere (a name, a symbolic link) may ever reach rmtree."""
    cells = out.resolve() / "cells"  # OUT's own folder: a link named cells leads elsewhere
    directory = (cells / cell.mode.name / cell.variant.name).resolve()
    if not directory.is_relative_to(cells) or directory.relative_to(cells).parts != (cell.mode.name, cell.variant.name):
        raise CellPathError(f"{cell.key}: its folder would be {directory}, not inside {cells}: not touched")
    return directory


class Runner:
    def __init__(self, matrix: Matrix, options: Options):
        self.matrix, self.options = matrix, options
        self.results: dict[str, dict[str, Any]] = {}
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.halted = ""  # how every cell broke, when the rest were not run for it (alike_before_any_step)

    # -- one cell ----------------------------------------------------------------------------
    def finished_before(self, cell: Cell) -> dict[str, Any] | None:
        try:
            result = json.loads((cell_dir(self.options.out, cell) / "cell.json").read_text())
            fingerprint = cell.fingerprint(self.matrix)
        except (OSError, ValueError, CellPathError):
            return None
        done = isinstance(result, dict) and result.get("state") not in (INTERRUPTED, ERROR, None)
        return result if done and result.get("fingerprint") == fingerprint else None

    def run_cell(self, cell: Cell, gpu: str | None) -> dict[str, Any]:
        """The cell run and analysed; whatever fails in vramscope on the way (a folder that cannot be
        made, a tree that cannot be copied) makes it an ERROR with its reason, never the run's end."""
        result: dict[str, Any] = {"mode": cell.mode.name, "variant": cell.variant.name, "fingerprint": None, "gpu": gpu,
                  "state": NOT_RUN, "rc": None, "wall_seconds": 0.0, "reason": "", "trees": {}, "findings": None,
                  "report": None, "log": None}
        try:
            return self._run_cell(cell, gpu, result)
        except Exception as e:  # any failure is this cell's, reported in its row
            return {**result, "state": ERROR, "reason": f"vramscope could not run this cell: {type(e).__name__}: {e}"}

    def _run_cell(self, cell: Cell, gpu: str | None, result: dict[str, Any]) -> dict[str, Any]:
        result["fingerprint"] = cell.fingerprint(self.matrix)
        directory = cell_dir(self.options.out, cell)
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        result["log"] = "log.txt"
        try:
            workspace = prepare(self.matrix, cell.variant, directory, self.options.out)
        except (SetupError, OSError) as e:
            result["reason"] = str(e)
            return self._save(directory, result)
        result["trees"] = {copy: tree for tree, copy in workspace.copies.items()}  # sites name the copies
        output = directory / "trace.vscope"
        env = {**os.environ, **dict(cell.mode.env), **dict(cell.variant.env)}
        env = run_environment(output, device_memory=self.matrix.device_memory, max_steps=self.matrix.max_steps,
                              preload=cell.variant.preload, base=env)
        if workspace.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join([*workspace.pythonpath, *filter(None, [env.get("PYTHONPATH")])])
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        command = workspace.command([*self.matrix.command, *cell.mode.args, *cell.variant.args])
        if command[0].endswith(".py"):
            command = [sys.executable, *command]
        started = time.time() - 1  # file times have coarse resolution on some filesystems
        t0 = time.monotonic()
        with open(directory / "log.txt", "wb") as log:
            log.write(f"$ {' '.join([*self.options.launcher, *command])}\n".encode())
            log.flush()
            result["state"], result["rc"] = self._wait(cell, [*self.options.launcher, *command], workspace.cwd, env, log)
        result["wall_seconds"] = round(time.monotonic() - t0, 3)
        if result["state"] == FAILED and _mentions_oom(directory / "log.txt"):
            result["state"] = OUT_OF_MEMORY
        self._analyse(directory, naming.run_files(output, started), result)
        if not self.options.keep_trees:
            shutil.rmtree(directory / "trees", ignore_errors=True)
        return self._save(directory, result)

    def _wait(self, cell: Cell, command: list[str], cwd: str, env: dict[str, Any], log: BinaryIO) -> tuple[str, int | None]:
        if self.stopping.is_set():
            return INTERRUPTED, None
        try:
            proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            log.write(f"vramscope compare: cannot start {command[0]}: {e}\n".encode())
            return FAILED, None
        with self.lock:
            self.running[cell.key] = proc
        try:
            rc = proc.wait(timeout=self.matrix.timeout)
            state = FINISHED if rc == 0 else FAILED
        except subprocess.TimeoutExpired:
            stop_group(proc)
            state, rc = TIMED_OUT, proc.returncode
        finally:
            with self.lock:
                self.running.pop(cell.key, None)
        return (INTERRUPTED, rc) if self.stopping.is_set() and state != FINISHED else (state, rc)

    def _analyse(self, directory: Path, traces: list[Path], result: dict[str, Any]) -> None:
        """Each trace analysed once, here (the core releases the GIL: cells analyse side by side), its
        summary kept in analysis.txt; the owners the cell's processes found are joined in the core."""
        result["steps"] = 0
        if not traces:
            if not result["reason"]:
                result["reason"] = why_no_trace(result["rc"], shown(directory / "log.txt"))
            return
        findings, report = directory / "findings.json", directory / "report.html"
        options = _core.CommandOptions()
        options.device_memory, options.skip_empty = self.matrix.device_memory, True
        options.json, options.html = str(findings), str(report)
        try:
            analysis = _core.analyze([str(t) for t in traces], options)
            summary = analysis.write_outputs(options)
            judged = json.loads(analysis.json())
            result["steps"] = max(run["steps"]["count"] for run in judged.get("runs", [judged]))
        except (RuntimeError, ValueError, MemoryError) as e:
            summary = f"vramscope: error: {e}\n"
            result["reason"] = result["reason"] or f"the analysis failed: {_core.terminal_safe(str(e))}"
        write_atomic(directory / "analysis.txt", summary)
        if findings.exists():
            result["findings"], result["report"] = findings.name, report.name
    def _save(self, directory: Path, result: dict[str, Any]) -> dict[str, Any]:
        write_atomic(directory / "cell.json", json.dumps(result, indent=1) + "\n")
        return result

    # -- the matrix ---------------------------------------------------------------------------
    def run(self, progress: Progress) -> bool:
        """Runs every cell (--resume: those not finished before); False when interrupted."""
        cells = self.matrix.cells()
        todo: queue.Queue[Cell] = queue.Queue()
        for cell in cells:
            earlier = self.finished_before(cell) if self.options.resume else None
            if earlier is not None:
                self.results[cell.key] = {**earlier, "resumed": True}
            else:
                todo.put(cell)
        def worker(gpu: str | None) -> None:
            while not self.stopping.is_set():
                with self.lock:
                    if not self.halted and "running" not in (r.get("state") for r in self.results.values()):
                        self.halted = self.alike_before_any_step(cells)
                    if self.halted:
                        return
                    try:
                        cell = todo.get_nowait()
                    except queue.Empty:
                        return
                    self.results[cell.key] = {"state": "running"}
                result = self.run_cell(cell, gpu)
                with self.lock:
                    self.results[cell.key] = result
                progress.cell_done(cell, result)

        threads = [threading.Thread(target=worker, args=(gpu,), daemon=True) for gpu in self.options.gpus]
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads):
                progress.show(self.counts(len(cells)))
                time.sleep(0.5)
        except KeyboardInterrupt:
            self.stopping.set()
            progress.note("interrupted: stopping the running cells; finished cells are kept (--resume goes on)")
            with self.lock:
                running = list(self.running.values())
            for proc in running:
                stop_group(proc)
            for t in threads:
                t.join()
        progress.show(self.counts(len(cells)), final=True)
        for cell in cells:
            if self.halted and cell.key not in self.results:
                self.results[cell.key] = {"mode": cell.mode.name, "variant": cell.variant.name, "state": NOT_RUN,
                                          "reason": "not run: every cell before it broke the same way before its "
                                                    "first step"}
        return not self.stopping.is_set()

    def alike_before_any_step(self, cells: list[Cell]) -> str:
        """How the cells ended, when every one run broke the same way before its first step, a baseline
        and another row among them (what a variant changes made no difference): nothing can be
        compared. "" otherwise."""
        run = [(cell, self.results[cell.key]) for cell in cells if self.results.get(cell.key, {}).get("state")
               not in (None, "running", NOT_RUN)]
        ways = {how_it_broke(result, cell_dir(self.options.out, cell) / "log.txt") for cell, result in run}
        rows = {cell.variant.name == BASELINE for cell, _ in run}
        return (ways.pop() or "") if len(ways) == 1 and None not in ways and rows == {True, False} else ""

    def counts(self, total: int) -> dict[str, Any]:
        with self.lock:
            states = [r.get("state") for r in self.results.values()]
        running = states.count("running")
        done = len(states) - running
        return {"done": done, "running": running, "queued": total - done - running, "total": total}


def shown(path: Path) -> str:
    """A path as the user would type it from here: relative when it is below the current folder."""
    relative = os.path.relpath(path)
    return path.as_posix() if relative.startswith("..") else relative


def how_it_broke(result: dict[str, Any], log: Path) -> str | None:
    """How a cell ended before its first step: its state and exit code, and what its command said
    last (what it died of) or, when it ran to its end, why no trace came. None when it judged a step."""
    if result.get("steps", 1 if result.get("findings") else 0):  # a cell.json from before steps were kept
        return None
    said = last_line(log) if result["state"] != FINISHED else ""
    code = "" if result.get("rc") is None else f", exit code {result['rc']}"
    return f"{result['state']}{code}: {said or result['reason']}"


def last_line(log: Path) -> str:
    """The last line a cell's command wrote, or "" (no log, or nothing in it)."""
    return next((line.strip() for line in reversed(log_tail(log, 4096).splitlines()) if line.strip()), "")


def log_tail(log: Path, size: int) -> str:
    """The last `size` bytes of a cell's log, where it says how it died; "" when there is none."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, os.path.getsize(log) - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the cell's whole process group, SIGKILL after the grace period."""
    for sig, wait in ((signal.SIGTERM, _GRACE_SECONDS), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _mentions_oom(log: Path) -> bool:
    tail = log_tail(log, 256 * 1024)
    return any(mark in tail for mark in _OOM_MARKS)
