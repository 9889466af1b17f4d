"""vramscope compare on CPU: the matrix, isolation of patched trees, the runner (resume, time limit,
Ctrl-C, preloads) and the table. Each cell's "training" here copies a real fixture's trace (recorded
on a GPU) to where its capture would write, so the statuses come from real findings; the GPU test
with real training is in test_compare_gpu.py."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from vramscope.compare import isolation
from vramscope.compare.matrix import ALL, BASELINE, MatrixError, flag_spec, from_dict, merge_flags, read

DATA = Path(__file__).resolve().parent.parent / "data"

TRAIN = '''\
import json, os, shutil, sys, time
TRACE = "leak_ctx_losses"          # the leak, as the project has it now
if os.environ.get("OTHER_LEAK"):
    TRACE = "leak_offload_stream"
time.sleep(float(os.environ.get("SLEEP", "0")))
out = json.loads(os.environ["VRAMSCOPE_RUN"])["output"]
shutil.copy(os.path.join(os.environ["TRACES"], TRACE + ".vscope"), out)
print("ran", TRACE, sys.argv[1:], os.environ.get("PRELOADED", ""))
print("gpu", os.environ.get("CUDA_VISIBLE_DEVICES"), "launched", os.environ.get("LAUNCHED"))
'''

FIX = '''\
--- a/train.py
+++ b/train.py
@@ -1,5 +1,5 @@
 import json, os, shutil, sys, time
-TRACE = "leak_ctx_losses"          # the leak, as the project has it now
+TRACE = "clean_adamw_accum"        # fixed
 if os.environ.get("OTHER_LEAK"):
     TRACE = "leak_offload_stream"
 time.sleep(float(os.environ.get("SLEEP", "0")))
'''


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    out = tmp_path_factory.mktemp("traces")
    for name in ("leak_ctx_losses", "clean_adamw_accum", "leak_offload_stream"):
        subprocess.run([sys.executable, "-m", "vramscope", "convert", str(DATA / f"{name}.pickle.gz"),
                        str(out / f"{name}.vscope")], check=True, capture_output=True)
    return out


def git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture
def project(tmp_path):
    """A user's project: a git repository with a committed script, an uncommitted change and an
    untracked file, and the fix as a patch beside it."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "train.py").write_text(TRAIN.replace("# the leak, as the project has it now", "# committed"))
    git(root, "init", "-q")
    git(root, "add", "train.py")
    git(root, "commit", "-qm", "first")
    git(root, "tag", "v1")
    (root / "train.py").write_text(TRAIN)  # uncommitted: the run uses the tree as it is now
    (root / "notes.txt").write_text("untracked\n")
    (tmp_path / "fix.patch").write_text(FIX)
    return root


def fingerprint(root: Path) -> str:
    """Every file under root, .git included, by path and content."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and "vramscope-compare" not in p.parts:
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


def compare(cwd, *args, traces, timeout=300, env=None):
    env = {**os.environ, "TRACES": str(traces), **(env or {})}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return subprocess.run([sys.executable, "-m", "vramscope", "compare", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def table(out: Path) -> dict:
    subprocess.run([sys.executable, "-m", "vramscope", "compare-table", str(out / "compare.json"), "--json",
                    str(out / "table.json")], check=True, capture_output=True)
    rows = json.loads((out / "table.json").read_text())["modes"]
    return {(m["mode"], c["row"]): c for m in rows for c in m["cells"]}


# -- the matrix ------------------------------------------------------------------------------------
def test_a_matrix_file_gives_every_mode_the_baseline_each_variant_and_all(tmp_path):
    (tmp_path / "fix.patch").write_text(FIX)
    (tmp_path / "m.toml").write_text(textwrap.dedent("""
        command = "python train.py --steps 40"
        max_steps = 30
        timeout = "90s"
        device_memory = "24GiB"
        [modes.vl]
        args = ["--mode", "vl"]
        [modes.text]
        args = "--mode text"
        env = { SEQ_LEN = 4096 }
        [variants.p1]
        patch = "fix.patch"
        label = "P1: the fix"
        [variants.p2]
        env = { PYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True" }
        args = ["--no-compile"]
    """))
    m = from_dict(read(tmp_path / "m.toml"), tmp_path)
    assert m.command == ["python", "train.py", "--steps", "40"] and m.max_steps == 30 and m.timeout == 90
    assert m.device_memory == 24 << 30
    assert [c.key for c in m.cells()] == ["vl/baseline", "vl/p1", "vl/p2", "vl/all",
                                          "text/baseline", "text/p1", "text/p2", "text/all"]
    assert m.modes[1].env == (("SEQ_LEN", "4096"),) and m.modes[1].args == ("--mode", "text")
    everything = m.rows()[-1]
    assert everything.name == ALL and everything.args == ("--no-compile",)
    assert [p.file for p in everything.patches] == [str(tmp_path / "fix.patch")]
    assert m.rows()[0].name == BASELINE and m.rows()[0].describe() == []


@pytest.mark.parametrize("spec, message", [
    ({"variants": {"p": {"env": {"A": "1"}}}}, "no command"),
    ({"command": "x", "variants": {"p": {"patch": "missing.patch"}}}, "variants.p.patch: "),
    ({"command": "x", "variants": {"p": {"pach": "fix.patch"}}}, "unknown key(s) pach"),
    ({"command": "x", "variants": {"p": {}}}, "changes nothing"),
    ({"command": "x", "variants": {"all": {"env": {"A": "1"}}}}, "'all' cannot name"),
    ({"command": "x", "timeout": "soon"}, "not a duration"),
    ({"command": "x", "max_steps": -1}, "max_steps: -1 is not a whole number"),
    ({"command": "x", "device_memory": "lots"}, "device_memory"),
])
def test_a_matrix_that_cannot_run_as_written_says_why(tmp_path, spec, message):
    (tmp_path / "fix.patch").write_text(FIX)
    with pytest.raises(MatrixError, match=None) as e:
        from_dict(spec, tmp_path)
    assert message in str(e.value)


@pytest.mark.parametrize("variants, why", [
    ({"a": {"env": {"K": "1"}}, "b": {"env": {"K": "2"}}}, "variants set K two ways ('1', '2')"),
    ({"a": {"ref": "v1"}, "b": {"ref": "v2"}}, "variants name different git refs (v1, v2)"),
])
def test_variants_that_cannot_be_combined_have_no_all_row_and_say_why(tmp_path, variants, why):
    m = from_dict({"command": "x", "variants": variants}, tmp_path)
    assert [r.name for r in m.rows()] == [BASELINE, "a", "b"]
    assert m.why_no_all().startswith(why)


def test_flags_build_the_same_matrix_and_add_to_a_file():
    spec = {}
    for kind, text in [("variant", "p=env:A=1"), ("variant", "p=args:--x 2"), ("variant", "q=preload:fixes.mod"),
                       ("mode", "vl=--mode vl"), ("mode", "vl=env:SEQ=512")]:
        flag_spec(spec, kind, text)
    assert spec == {"variants": {"p": {"env": {"A": "1"}, "args": ["--x", "2"]}, "q": {"preload": ["fixes.mod"]}},
                    "modes": {"vl": {"args": ["--mode", "vl"], "env": {"SEQ": "512"}}}}
    merged = merge_flags({"command": "python t.py", "variants": {"p": {"label": "P"}}}, spec)
    assert merged["variants"]["p"] == {"label": "P", "env": {"A": "1"}, "args": ["--x", "2"]}
    with pytest.raises(MatrixError, match="unknown kind 'pach'"):
        flag_spec({}, "variant", "p=pach:x")


# -- isolation -------------------------------------------------------------------------------------
def test_a_patch_applies_to_a_copy_of_the_tree_as_it_is_now_and_never_to_the_tree(project, tmp_path):
    before = fingerprint(project)
    out = project / "vramscope-compare"  # inside the user's repository: git must not reach it
    m = from_dict({"command": "python train.py", "variants": {"fix": {"patch": "../fix.patch"}}}, project)
    ws = isolation.prepare(m, m.variants[0], out / "cells" / "default" / "fix", out)
    copy = Path(ws.cwd)
    assert copy != project and out in copy.parents
    assert 'TRACE = "clean_adamw_accum"' in (copy / "train.py").read_text()  # patched on the uncommitted tree
    assert (copy / "notes.txt").read_text() == "untracked\n"
    assert not (copy / "vramscope-compare").exists() and not (copy / ".git").exists()
    assert ws.pythonpath == [str(copy)]
    assert ws.command(["python", str(project / "train.py")]) == ["python", str(copy / "train.py")]
    assert fingerprint(project) == before
    assert git(project, "status", "--porcelain") == " M train.py\n?? notes.txt\n?? vramscope-compare/\n"


def test_a_ref_is_taken_with_git_archive_and_a_patch_that_does_not_apply_stops_the_cell(project, tmp_path):
    before = fingerprint(project)
    out = tmp_path / "out"
    m = from_dict({"command": "python train.py", "variants": {"old": {"ref": "v1"}, "bad": {"ref": "v1", "patch": "../fix.patch"},
                                                             "nope": {"ref": "v9"}}}, project)
    ws = isolation.prepare(m, m.variants[0], out / "old", out)
    assert "# committed" in Path(ws.cwd, "train.py").read_text() and not Path(ws.cwd, "notes.txt").exists()
    with pytest.raises(isolation.SetupError, match="patch fix.patch does not apply"):
        isolation.prepare(m, m.variants[1], out / "bad", out)
    with pytest.raises(isolation.SetupError, match="ref v9: not a commit"):
        isolation.prepare(m, m.variants[2], out / "nope", out)
    assert fingerprint(project) == before
    assert "worktree" not in git(project, "worktree", "list").split("\n", 1)[-1]


def test_a_patch_reaching_outside_its_tree_is_refused(project, tmp_path):
    (tmp_path / "escape.patch").write_text("--- a/../../evil.py\n+++ b/../../evil.py\n@@ -0,0 +1 @@\n+x = 1\n")
    m = from_dict({"command": "python train.py", "variants": {"evil": {"patch": "../escape.patch"}}}, project)
    with pytest.raises(isolation.SetupError):
        isolation.prepare(m, m.variants[0], tmp_path / "out" / "evil", tmp_path / "out")
    assert not list(tmp_path.rglob("evil.py"))


# -- the runner and the table ----------------------------------------------------------------------
def test_one_command_gives_the_table_with_each_status_from_the_numbers(project, traces, tmp_path):
    before = fingerprint(project)
    (tmp_path / "preload_mark.py").write_text("import os\nos.environ['PRELOADED'] = 'yes'\n")
    proc = compare(project, "--variant", "fix=patch:../fix.patch", "--variant", "harmless=preload:../preload_mark.py",
                   "--variant", "other=env:OTHER_LEAK=1", "--mode", "a=--a", "--mode", "b=--b", "--", "python",
                   "train.py", traces=traces)
    assert proc.returncode == 0, proc.stderr
    out = project / "vramscope-compare"
    cells = table(out)
    for mode in ("a", "b"):
        assert cells[(mode, "baseline")]["status"] == "baseline" and cells[(mode, "baseline")]["verdict"] == "leak"
        assert cells[(mode, "fix")]["status"] == "root-cause fix", cells[(mode, "fix")]
        assert cells[(mode, "harmless")]["status"] == "no effect"
        assert cells[(mode, "other")]["status"] == "worse"  # its leak is twice the baseline's
        assert cells[(mode, "all")]["verdict"] == "leak"  # the other leak is in `all` too
    log = (out / "cells" / "b" / "harmless" / "log.txt").read_text()
    assert "ran leak_ctx_losses ['--b'] yes" in log  # mode arguments, preload before the script
    assert "fix             no leak" in proc.stdout and "gone with: fix" in proc.stdout
    assert (out / "compare.md").read_text().count("| **root-cause fix") == 2
    assert (out / "cells" / "a" / "fix" / "report.html").stat().st_size > 0
    assert not (out / "cells" / "a" / "fix" / "trees").exists()  # copies go once the cell is done
    assert fingerprint(project) == before


def test_resume_runs_only_cells_not_finished_with_the_same_settings(project, traces):
    args = ["--variant", "fix=patch:../fix.patch", "--", "python", "train.py"]
    assert compare(project, *args, traces=traces).returncode == 0
    out = project / "vramscope-compare" / "cells" / "default"
    first = {c: (out / c / "cell.json").stat().st_mtime_ns for c in ("baseline", "fix")}
    (out / "fix" / "cell.json").unlink()  # as if it never finished
    proc = compare(project, "--resume", *args, traces=traces)
    assert proc.returncode == 0, proc.stderr
    assert (out / "baseline" / "cell.json").stat().st_mtime_ns == first["baseline"]
    assert "default/fix: finished" in proc.stderr and "default/baseline" not in proc.stderr
    proc = compare(project, "--resume", "--variant", "fix=env:X=1", *args, traces=traces)  # fix changed: rerun
    assert "default/fix: finished" in proc.stderr and "default/baseline" not in proc.stderr


def test_a_cell_past_its_time_limit_is_stopped_and_broken(project, traces):
    proc = compare(project, "--timeout", "2", "--variant", "slow=env:SLEEP=60", "--", "python", "train.py",
                   traces=traces)
    assert proc.returncode == 0, proc.stderr
    cells = table(project / "vramscope-compare")
    assert cells[("default", "slow")]["outcome"] == "timed-out"
    assert cells[("default", "slow")]["status"] == "broken"
    assert cells[("default", "slow")]["wall_seconds"] < 30


def test_a_failing_preload_fails_its_cell_instead_of_running_unpatched(project, traces, tmp_path):
    (tmp_path / "broken_patch.py").write_text("raise ImportError('the monkeypatch needs transformers 9')\n")
    proc = compare(project, "--variant", "mp=preload:../broken_patch.py", "--", "python", "train.py", traces=traces)
    cells = table(project / "vramscope-compare")
    assert cells[("default", "mp")]["outcome"] == "failed" and cells[("default", "mp")]["status"] == "broken"
    assert "exit code 3" in proc.stdout
    log = (project / "vramscope-compare" / "cells" / "default" / "mp" / "log.txt").read_text()
    assert "the monkeypatch needs transformers 9" in log and "ran " not in log


def test_a_cell_vramscope_fails_on_is_broken_with_its_reason_and_the_run_goes_on(project, traces, monkeypatch):
    """Any exception inside a cell (here its workspace, as a tar error or a name too long for mkdir
    would) is that cell's: recorded with its reason, the later cells run, and the table reads it."""
    from vramscope import commands
    from vramscope.compare import runner

    def prepare(matrix, variant, cell_dir, out_dir):
        if variant.name == "boom":
            raise KeyError("the setup blew up")
        return real_prepare(matrix, variant, cell_dir, out_dir)

    real_prepare = runner.prepare
    monkeypatch.setattr(runner, "prepare", prepare)
    monkeypatch.setenv("TRACES", str(traces))
    monkeypatch.chdir(project)
    rc = commands.main(["compare", "--gpus", "0", "--variant", "boom=env:A=1", "--variant", "after=env:B=1", "--",
                        "python", "train.py"])
    assert rc == 0
    cells = table(project / "vramscope-compare")
    assert cells[("default", "boom")]["outcome"] == "error" and cells[("default", "boom")]["status"] == "broken"
    assert "KeyError" in cells[("default", "boom")]["why"] and "the setup blew up" in cells[("default", "boom")]["why"]
    assert cells[("default", "after")]["outcome"] == "finished" and cells[("default", "all")]["outcome"] == "finished"


def test_every_cell_breaking_the_same_way_before_a_step_stops_the_run_with_its_log(project, traces, tmp_path):
    """A command that cannot start anywhere (an import missing in every cell): once the baseline and a
    variant break alike, the rest are not run; the error says what they died of and where the log is."""
    (project / "train.py").write_text("import torchh  # a typo no variant fixes\n")
    proc = compare(project, "--variant", "a=env:A=1", "--variant", "b=env:B=1", "--mode", "m1=--x", "--mode",
                   "m2=--y", "--", "python", "train.py", traces=traces)
    assert proc.returncode == 2, proc.stderr
    log = os.path.join("vramscope-compare", "cells", "m1", "baseline", "log.txt")
    assert ("every cell broke the same way before its first step, so nothing can be compared: failed, exit code 1: "
            f"ModuleNotFoundError: No module named 'torchh'. See {log}; the other 6 cells were not run.") in proc.stderr
    assert f"m1/baseline: failed in" in proc.stderr and f"{log} says why" in proc.stderr  # each cell's log, by its path
    ran = [c["variant"] for c in json.loads((project / "vramscope-compare" / "compare.json").read_text())["cells"]
           if c["state"] != "not-run"]
    assert ran == ["baseline", "a"], ran
    assert "table" not in proc.stdout and proc.stdout == ""


def test_cells_that_break_in_different_ways_run_on_and_give_the_table(project, traces):
    (project / "train.py").write_text(TRAIN + "import os\nif os.environ.get('CRASH'): raise SystemExit(3)\n")
    proc = compare(project, "--variant", "crash=env:CRASH=1", "--", "python", "train.py", traces=traces)
    assert proc.returncode == 0, proc.stderr
    cells = table(project / "vramscope-compare")
    assert cells[("default", "crash")]["outcome"] == "failed" and cells[("default", "baseline")]["verdict"] == "leak"


def test_ctrl_c_stops_cleanly_and_keeps_finished_cells(project, traces):
    env = {**os.environ, "TRACES": str(traces), "SLEEP": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "vramscope", "compare", "--variant", "slow=env:SLEEP=60",
                             "--variant", "fix=patch:../fix.patch", "--", "python", "train.py"], cwd=project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cells = project / "vramscope-compare" / "cells" / "default"
    deadline = time.monotonic() + 60
    while not (cells / "slow" / "log.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    assert json.loads((cells / "baseline" / "cell.json").read_text())["state"] == "finished"
    assert json.loads((cells / "slow" / "cell.json").read_text())["state"] == "interrupted"
    assert not (cells / "fix").exists()  # queued, never started
    assert "INTERRUPTED" in stdout


def test_cells_spread_over_the_gpus_one_each_and_a_launcher_prefixes_every_cell(project, traces):
    proc = compare(project, "--gpus", "0,1", "--variant", "a=env:SLEEP=1", "--variant", "b=env:SLEEP=1", "--",
                   "python", "train.py", traces=traces)
    assert proc.returncode == 0, proc.stderr
    cells = project / "vramscope-compare" / "cells" / "default"
    gpus = {c: json.loads((cells / c / "cell.json").read_text())["gpu"] for c in ("baseline", "a", "b", "all")}
    assert set(gpus.values()) == {"0", "1"}
    for c, gpu in gpus.items():
        assert f"gpu {gpu} launched None" in (cells / c / "log.txt").read_text()
    proc = compare(project, "--launcher", "env LAUNCHED=yes", "--jobs", "2", "--variant", "a=env:X=1", "--",
                   "python", "train.py", traces=traces)
    assert proc.returncode == 0, proc.stderr
    log = (cells / "a" / "log.txt").read_text()
    assert log.startswith("$ env LAUNCHED=yes python train.py") and "launched yes" in log
