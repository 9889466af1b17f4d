"""The hostile-input corpus (tests/data/hostile, made by its make_corpus.py): every file through
analyze, convert, export and report as a user would run them, each under an address-space limit
and a timeout. No signal death, no Python traceback, the exit code its expectation says, never
"NO LEAK" for input that cannot be trusted, and peak memory within the stated multiple of the
limits the commands run with."""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

HOSTILE = Path(__file__).resolve().parent.parent / "data" / "hostile"
EXPECT = json.loads((HOSTILE / "expectations.json").read_text())
TRACES = [n for n, e in EXPECT.items() if not e["outcome"].startswith("report")]
FINDINGS = [n for n, e in EXPECT.items() if e["outcome"].startswith("report")]

# The limits every command runs with here, and what a run may take beside them: pickle values
# held and events kept are each under --max-memory; vectors may double past it while growing;
# the interpreter, zlib and the gzip thread take the rest.
MAX_MEMORY = 256 << 20
LIMITS = ["--max-memory", "256MiB", "--max-decoded", "1GiB"]
ADDRESS_SPACE = 3 << 30
PEAK_RSS = 4 * MAX_MEMORY + (200 << 20)
TIMEOUT = 60


def run(*args: str) -> tuple[int, str, int, float]:
    """(exit code, stdout + stderr, peak RSS in bytes, seconds) of `vramscope ARGS`."""

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "vramscope", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=limit)
    timer = threading.Timer(TIMEOUT, proc.kill)
    timer.start()
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - started
    assert seconds < TIMEOUT, f"vramscope {' '.join(args)} ran past {TIMEOUT} s"
    return proc.returncode, out.decode(), usage.ru_maxrss * 1024, seconds  # strict: every output is UTF-8


def check_clean(rc: int, out: str, rss: int, args: tuple) -> None:
    assert rc >= 0, f"killed by signal {-rc}: vramscope {' '.join(args)}\n{out}"
    assert "Traceback" not in out, out
    assert rss < PEAK_RSS, f"peak RSS {rss >> 20} MiB: vramscope {' '.join(args)}"


@pytest.mark.parametrize("name", TRACES)
def test_hostile_trace(name, tmp_path):
    path = str(HOSTILE / name)
    outcome = EXPECT[name]["outcome"]

    args = ("analyze", path, "--json", "-", *LIMITS)
    rc, out, rss, _ = run(*args)
    check_clean(rc, out, rss, args)
    assert rc == (2 if outcome == "error" else 0), f"{name}: {EXPECT[name]['why']}\n{out}"
    if outcome == "error":
        assert f"vramscope: error: {path}" in out, "the error names the file"
    else:
        verdict = json.loads(out)["verdict"]
        assert (verdict == "cannot-judge") == (outcome != "judged"), f"{name}: {verdict}\n{out}"

    args = ("analyze", path, "--fail-on-leak", *LIMITS)
    rc, out, rss, _ = run(*args)
    check_clean(rc, out, rss, args)
    assert rc == (2 if outcome != "judged" else rc) and rc in (0, 1, 2), out
    if outcome != "judged":
        assert "NO LEAK" not in out, out
    if outcome in ("cannot-judge", "nothing"):
        assert "CANNOT JUDGE" in out, out
    assert "\x1b" not in out and "\x00" not in out, "names reach the terminal escaped"

    for args, made in ((("convert", path, str(tmp_path / "out.vscope"), *LIMITS), "out.vscope"),
                       (("export", path, "--memory-viz", str(tmp_path / "viz.pickle"), "--perfetto",
                         str(tmp_path / "p.json"), *LIMITS), "viz.pickle"),
                       (("report", path, "-o", str(tmp_path / "r.html"), *LIMITS), "r.html")):
        rc, out, rss, _ = run(*args)
        check_clean(rc, out, rss, args)
        passes = outcome in ("judged", "nothing") or (outcome == "cannot-judge" and args[0] == "report")
        assert rc == (0 if passes else 2), f"{' '.join(args)}\n{out}"
        if passes:
            assert (tmp_path / made).stat().st_size > 0


@pytest.mark.parametrize("name", FINDINGS)
def test_hostile_findings_json(name, tmp_path):
    page = tmp_path / "r.html"
    args = ("report", str(HOSTILE / name), "-o", str(page))
    rc, out, rss, _ = run(*args)
    check_clean(rc, out, rss, args)
    ok = EXPECT[name]["outcome"] == "report-ok"
    assert rc == (0 if ok else 2), out
    if ok:
        html = page.read_text()
        data = html[html.index('<script id="data"'):]
        data = data[data.index(">") + 1: data.index("</script>")]
        assert not set(data) & set("<>&\u2028\u2029"), "no string can change the page"
    else:
        assert name in out


def test_export_then_analyze_empty_lists(tmp_path):
    """Our own memory_viz export of a trace, read back: empty lists are written as MARK + APPENDS."""
    viz = tmp_path / "viz.pickle"
    rc, out, _, _ = run("export", str(HOSTILE / "good.vscope"), "--memory-viz", str(viz))
    assert rc == 0, out
    rc, out, _, _ = run("analyze", str(viz), "--json", "-")
    assert rc == 0 and json.loads(out)["verdict"] == "leak", out


def test_inputs_that_never_end_are_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero", str(tmp_path)):
        rc, out, _, seconds = run("analyze", path)
        assert rc == 2 and seconds < 10, out
        assert path in out and ("not a regular file" in out or "directory" in out), out


def test_limits_stop_bombs_naming_offset_and_option():
    """A 64 MiB string ends at the default string limit, 16 M dicts at --max-memory: each error names
    the offset and the option that raises the limit."""
    rc, out, _, _ = run("analyze", str(HOSTILE / "string_64mib_fanout.pickle.gz"))
    assert rc == 2 and "--max-string" in out and "offset" in out, out
    rc, out, _, _ = run("analyze", str(HOSTILE / "pickle_dict_bomb.pickle.gz"), "--max-memory", "64MiB")
    assert rc == 2 and "--max-memory" in out and "offset" in out, out


@pytest.mark.parametrize("target", ["missing/dir/out", "/dev/full", "."])
def test_output_errors_exit_2_naming_path_and_reason(target, tmp_path):
    fixture = str(HOSTILE / "leak_ctx_losses.pickle.gz")
    for args in (("analyze", fixture, "--json", target), ("report", fixture, "-o", target),
                 ("report", str(HOSTILE / "findings_good.json"), "-o", target), ("convert", fixture, target),
                 ("export", fixture, "--perfetto", target)):
        rc, out, _, _ = run(*args)
        assert rc == 2 and "Traceback" not in out, out
        assert target in out and any(r in out for r in ("No such file", "No space left", "Is a directory")), out


def test_stdout_write_failure_is_exit_2():
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "vramscope", "analyze", str(HOSTILE / "leak_ctx_losses.pickle.gz"),
                               "--json", "-"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=TIMEOUT)
    assert proc.returncode == 2 and "stdout" in proc.stderr and "No space left" in proc.stderr, proc.stderr


def test_running_out_of_memory_names_the_file():
    """Limits set above what the machine gives (here an address-space limit): the allocation that
    fails is reported with the file, not as a bare std::bad_alloc."""
    path = str(HOSTILE / "pickle_dict_bomb.pickle.gz")
    proc = subprocess.run([sys.executable, "-m", "vramscope", "analyze", path, "--max-memory", "64GiB"],
                          capture_output=True, text=True, timeout=TIMEOUT,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (600 << 20, 600 << 20)))
    assert proc.returncode == 2 and f"{path}: out of memory while reading it" in proc.stderr, proc.stderr


def test_arguments_are_checked(tmp_path):
    fixture = HOSTILE / "leak_ctx_losses.pickle.gz"
    rc, out, _, _ = run("analyze", str(fixture), "--warmup", "4294967296")
    assert rc == 2 and "--warmup" in out, out
    copy = tmp_path / "in.pickle.gz"
    copy.write_bytes(fixture.read_bytes())
    rc, out, _, _ = run("convert", str(copy), str(copy))
    assert rc == 2 and "would destroy it" in out, out
    assert copy.read_bytes() == fixture.read_bytes(), "the input is untouched"


def test_corpus_is_current():
    """Every file has an expectation and every expectation a file."""
    files = {p.name for p in HOSTILE.iterdir()} - {"make_corpus.py", "expectations.json", "README.md"}
    assert files == set(EXPECT), files ^ set(EXPECT)
    assert all(stat.S_ISREG((HOSTILE / n).stat().st_mode) for n in EXPECT)


@pytest.mark.parametrize("owners, embedded", [("[" * 1000, False), ('[{"owner_lines": ["</script><!--<script>"]}]', True),
                                              ("1, alert(1)", False)])
def test_owners_file_beside_a_trace_is_checked_before_it_is_embedded(owners, embedded, tmp_path):
    trace = tmp_path / "run.vscope"
    trace.write_bytes((HOSTILE / "good.vscope").read_bytes())
    (tmp_path / "run.vscope.owners.json").write_text(owners)
    page = tmp_path / "r.html"
    rc, out, _, _ = run("report", str(trace), "-o", str(page))
    assert rc == 0, out
    assert ("owners out" in out) != embedded, out
    html = page.read_text()
    data = html[html.index('<script id="data"'):]
    data = data[data.index(">") + 1: data.index("</script>")]
    assert not set(data) & set("<>&") and "alert" not in data
    assert json.loads(data)["owners"] == ([[{"owner_lines": ["</script><!--<script>"]}]] if embedded else [None])
