"""The command line as users meet it: demo, analyze, --json, --fail-on-leak, convert, bad input."""

import gzip
import json
import pickle

import pytest

from conftest import DATA, FIXTURES, stderr_on_a_terminal, truth, vramscope


def test_fixtures_are_present():
    assert len(FIXTURES) >= 5, "tests/data must hold the recorded snapshots"


def test_demo_reports_the_side_stream_leak():
    out = vramscope("demo").stdout
    assert "LEAK" in out
    assert "/step" in out
    assert "side stream" in out
    assert "record_fixtures.py" in out


def test_demo_json_to_stdout_is_json_alone_and_takes_analyzes_options():
    """The intro goes to stderr; --device-memory, an analyze option, is the user's to give."""
    proc = vramscope("demo", "--json", "-", "--device-memory", "40GiB")
    findings = json.loads(proc.stdout)
    assert findings["devices"][0]["total_memory"] == 40 << 30
    assert "vramscope demo:" in proc.stderr


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly():
    """`vramscope demo | head -1`, `analyze F | head`: as `git log | head`, no error and exit 0 (here the
    reader reads nothing at all)."""
    import subprocess
    import sys

    for args in (["demo"], ["analyze", str(FIXTURES[0])]):
        proc = subprocess.run(f"{sys.executable} -m vramscope {' '.join(args)} | true; "
                              "echo ${PIPESTATUS[0]}", shell=True, executable="/bin/bash", capture_output=True, text=True)
        assert proc.stdout.strip() == "0", (args, proc.stdout, proc.stderr)
        assert "error" not in proc.stderr and "Broken pipe" not in proc.stderr, (args, proc.stderr)


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_analyze_json_matches_the_recorded_truth(fixture, tmp_path):
    out = tmp_path / "findings.json"
    vramscope("analyze", str(fixture), "--json", str(out))
    findings = json.loads(out.read_text())
    expected = truth(fixture)["expected"]
    assert findings["schema_version"] == 1
    assert findings["verdict"] == expected["verdict"]
    # A loop with no optimizer: a snapshot has no markers, so its period tells its steps.
    optimizer = expected.get("unit", "optimizer step") == "optimizer step"
    assert findings["steps"]["source"] == ("optimizer-annotations" if optimizer else "inferred-period")
    assert findings["steps"]["count"] >= 20
    assert len({p["step"] for p in findings["timeline"]}) >= findings["steps"]["count"]
    assert all(p["allocated"] <= p["peak_allocated"] for p in findings["timeline"])
    if expected["verdict"] == "leak":
        top = findings["leaks"][0]
        assert top["site"]["function"] == expected["leak_site"]["function"]
        assert top["site"]["line"] == expected["leak_site"]["line"]
        assert (top["stream_kind"] == "side") == (expected["leak_stream"] == "side")
        assert top["stack"][0] == top["site"] or top["stack"]
        assert top["bytes_per_step"] > 0
    else:
        assert findings["leaks"] == []
        assert findings["not_leaks"], "a clean run still explains what it holds"


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_timeline_follows_memory_allocated_per_step(fixture):
    """Step ends sit where the recording run read torch.cuda.memory_allocated()."""
    findings = json.loads(vramscope("analyze", str(fixture), "--json", "-").stdout)
    ours = [p["allocated"] for p in findings["timeline"] if p["complete"]]
    # A trace that starts mid-run (a ring buffer that wrapped): its step k is the run's before + k.
    recorded = [s["allocated"] for s in truth(fixture)["steps"]][findings["steps"]["before_trace"]:]
    if findings["steps"]["source"] == "inferred-period":
        # A period's step ends where the next repeat begins: the last repeat is the unfinished tail.
        recorded = recorded[:-1]
    assert len(ours) == len(recorded)
    warm = findings["steps"]["warmup"]
    for step, (a, b) in enumerate(zip(ours[warm:], recorded[warm:]), start=warm):
        assert abs(a - b) <= 0.05 * b, f"step {step}: {a} vs memory_allocated() {b}"


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_summary_fits_a_100_column_terminal(fixture):
    out = vramscope("analyze", str(fixture), "--device-memory", "80GiB").stdout
    assert out.strip()
    assert max(len(line) for line in out.splitlines()) <= 100


def test_fail_on_leak_sets_the_exit_code():
    leaky = [f for f in FIXTURES if truth(f)["expected"]["verdict"] == "leak"]
    clean = [f for f in FIXTURES if truth(f)["expected"]["verdict"] == "no-leak"]
    assert leaky and clean
    vramscope("analyze", str(leaky[0]), "--fail-on-leak", check_rc=1)
    vramscope("analyze", str(clean[0]), "--fail-on-leak", check_rc=0)


def test_json_to_stdout_is_pure_json():
    proc = vramscope("analyze", str(FIXTURES[0]), "--json", "-")
    json.loads(proc.stdout)


def test_device_memory_gives_an_oom_projection(tmp_path):
    leaky = next(f for f in FIXTURES if truth(f)["expected"]["verdict"] == "leak")
    out = tmp_path / "f.json"
    vramscope("analyze", str(leaky), "--device-memory", "80GiB", "--json", str(out))
    findings = json.loads(out.read_text())
    step = findings["projected_oom_step"]
    assert isinstance(step, int) and step > findings["steps"]["count"]
    rate = findings["leak_bytes_per_step"]
    last = [p for p in findings["timeline"] if p["complete"]][-1]
    assert abs((step - last["step"]) * rate - (80 * 2**30 - last["peak_allocated"])) <= rate


def test_convert_then_analyze_gives_the_same_findings(tmp_path):
    for fixture in FIXTURES:
        trace = tmp_path / (fixture.name + ".vscope")
        vramscope("convert", str(fixture), str(trace))
        a = json.loads(vramscope("analyze", str(fixture), "--json", "-").stdout)
        b = json.loads(vramscope("analyze", str(trace), "--json", "-").stdout)
        assert a["verdict"] == b["verdict"]
        assert [l["bytes_per_step"] for l in a["leaks"]] == [l["bytes_per_step"] for l in b["leaks"]]
        assert a["timeline"] == b["timeline"]
        if truth(fixture)["recorder"]["stacks"] == "python":
            # With stacks="all" the long C++ names of the string tables dominate, stored uncompressed
            # (docs/trace-format.md): such a trace is larger than the gzip'd pickle.
            assert trace.stat().st_size < fixture.stat().st_size


def test_several_files_report_each_run(tmp_path):
    out = tmp_path / "f.json"
    vramscope("analyze", str(FIXTURES[0]), str(FIXTURES[1]), "--json", str(out))
    findings = json.loads(out.read_text())
    assert len(findings["runs"]) == 2


class _Boom:
    """Unpickling this would create a file: proof of code execution if it ever appears."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pickle"
    evil.write_bytes(pickle.dumps({"segments": [], "device_traces": [[_Boom(str(marker))]]}))
    proc = vramscope("analyze", str(evil), check_rc=2)
    assert "refused" in proc.stderr and str(evil) in proc.stderr and "offset" in proc.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "neither a .vscope trace nor a torch memory snapshot"),
        (b"hello world", "neither a .vscope trace nor a torch memory snapshot"),
        (gzip.compress(pickle.dumps([1, 2, 3])), "not a torch memory snapshot"),
        (gzip.compress(pickle.dumps({"segments": []}))[:-12], "gzip"),
        (pickle.dumps({"device_traces": [[{"action": "alloc"}]]})[:-3], "cut short"),
    ],
    ids=["empty", "text", "not-a-snapshot", "cut-gzip", "cut-pickle"],
)
def test_bad_input_gets_a_clear_error_naming_the_file(tmp_path, content, message):
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(content)
    proc = vramscope("analyze", str(bad), check_rc=2)
    assert message in proc.stderr
    assert str(bad) in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_file_and_bad_options():
    assert "cannot open" in vramscope("analyze", "/nonexistent.pickle", check_rc=2).stderr
    assert "--window" in vramscope("analyze", str(FIXTURES[0]), "--window", "zero", check_rc=2).stderr
    unknown = vramscope("frobnicate", check_rc=2).stderr
    assert "unknown command 'frobnicate'" in unknown and "vramscope --help" in unknown


def test_version():
    from vramscope import __version__

    assert vramscope("--version").stdout == vramscope("-V").stdout == f"vramscope {__version__}\n"


def test_a_misspelt_command_gets_the_one_it_is_close_to():
    assert "unknown command 'analyse': did you mean analyze?" in vramscope("analyse", "x.pickle", check_rc=2).stderr


def test_the_overview_says_what_each_command_does_in_a_whole_sentence():
    lines = vramscope("--help").stdout.splitlines()[2:]
    for line in lines:
        name, said = line[:17].strip(), line[17:]
        assert said.endswith(".") or name == "--version, -V", line  # never cut mid-sentence
        assert "[" not in said and len(line) <= 110, line  # no usage string in place of what it does
    assert "  compare        Which candidate fix removes the leak, in each mode: one table of fresh runs." in lines


def test_a_required_option_is_shown_required_in_the_usage():
    usage = vramscope("report", "--help").stdout.split("\n\n")[0]
    assert " -o OUT.html " in usage and "[-o OUT.html]" not in usage, usage
    assert "usage: vramscope compare [MATRIX.toml] [options] [-- COMMAND...]" in vramscope("compare", "--help").stdout


def test_byte_counts_in_the_findings_are_whole_numbers():
    """A rate in bytes per step too: 2621440, never 2.62144e+06 (six digits: 1048580 for 1048576)."""
    text = vramscope("analyze", str(DATA / "leak_ctx_losses.pickle.gz"), "--json", "-").stdout
    assert '"leak_bytes_per_step":2621440,' in text and "e+" not in text
    findings = json.loads(text)
    assert [leak["bytes_per_step"] for leak in findings["leaks"]] == [2097152, 524288]


def test_a_count_of_one_is_said_in_the_singular():
    text = vramscope("analyze", str(DATA / "device" / "pg_once.vscope")).stdout
    assert "from 1 sites" not in text and "first 1 steps" not in text
    assert "from 1 site;" in text, text


def test_each_page_is_titled_by_what_it_shows(tmp_path):
    vramscope("report", str(DATA / "leak_ctx_losses.pickle.gz"), "-o", str(tmp_path / "r.html"))
    assert "<title>vramscope: leak_ctx_losses.pickle.gz</title>" in (tmp_path / "r.html").read_text()
    vramscope("diff", str(DATA / "leak_ctx_losses.pickle.gz"), str(DATA / "clean_adamw_accum.pickle.gz"),
              "--html", str(tmp_path / "d.html"))
    assert "<title>vramscope diff: leak_ctx_losses.pickle.gz, clean_adamw_accum.pickle.gz</title>" in \
        (tmp_path / "d.html").read_text()


def test_a_ledger_of_torchs_memory_names_the_leaks_outside_it():
    """NCCL's groups leak 388 MiB a step outside torch's allocator: the ledger, of torch's allocated
    memory, grows 0 B, and says where the leak is instead of standing beside it as if none."""
    text = vramscope("analyze", str(DATA / "device" / "pg_per_step.vscope")).stdout
    ledger = text[text.index("Ledger"):text.index("Peak")]
    assert "(0 B)" in ledger
    assert ("    not in it: +388.0 MiB/step leaking in device memory outside torch's allocator (NCCL)\n"
            "    not in it: +1.1 MiB/step leaking in pinned host memory (NCCL)\n") in ledger, ledger
    assert "not in it:" not in vramscope("analyze", str(DATA / "leak_ctx_losses.pickle.gz")).stdout


@pytest.mark.parametrize("args, says", [
    (("analyze", "--window", "0", "x.pickle"), "--window takes a whole number from 1 to 1000"),
    (("analyze", "--frob", "x.pickle"), "unrecognized arguments: --frob"),
    (("report", "x.pickle"), "the following arguments are required: -o/--output"),
    (("run", "--max-steps", "x"), "--max-steps: 'x' is not a whole number"),
])
def test_a_usage_error_is_its_message_and_a_one_line_hint(args, says):
    err = vramscope(*args, check_rc=2).stderr
    assert says in err, err
    assert err.count("\n") == 2 and f"Try 'vramscope {args[0]} --help'." in err, "no page of help burying it"


def test_help_says_the_real_limits_and_every_option():
    assert "from 1 B to 8.0 MiB" in vramscope("convert", "--help").stdout
    report = vramscope("report", "--help").stdout
    assert "--steps A:B" in report and "--device-memory SIZE" in report
    overview = vramscope("--help").stdout
    assert all(name in overview for name in ("analyze", "run", "compare", "compare-table", "demo", "--version"))


def test_a_size_without_a_unit_is_refused_where_bytes_make_no_sense():
    err = vramscope("analyze", str(FIXTURES[0]), "--device-memory", "80", check_rc=2).stderr
    assert "--device-memory 80: give the unit, e.g. 80GiB" in err
    assert "give the unit" in vramscope("run", "--device-memory", "80", "--", "true", check_rc=2).stderr
    vramscope("convert", str(FIXTURES[0]), "/dev/null", "--chunk-size", "4096B")  # B: bytes, meant


def test_the_max_memory_error_never_rounds_its_limit_to_nothing():
    err = vramscope("analyze", str(FIXTURES[0]), "--max-memory", "1000KiB", check_rc=2).stderr
    assert "--max-memory takes a size from 1.0 MiB" in err and " 0 MiB" not in err


def test_findings_json_are_not_judged_again(tmp_path):
    findings = tmp_path / "f.json"
    vramscope("analyze", str(FIXTURES[0]), "--json", str(findings))
    err = vramscope("report", str(findings), "--window", "2", "-o", str(tmp_path / "r.html"), check_rc=2).stderr
    assert "--window judges a trace; findings JSON was judged already" in err


def test_snapshot_without_history_says_how_to_record_one(tmp_path):
    with gzip.open(FIXTURES[0]) as f:
        snapshot = pickle.load(f)
    snapshot["device_traces"] = [[] for _ in snapshot["device_traces"]]
    path = tmp_path / "state_only.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    out = vramscope("analyze", str(path)).stdout
    assert "_record_memory_history" in out
    assert "Largest holders" in out


def test_python_api_returns_the_findings():
    import vramscope

    findings = vramscope.analyze(FIXTURES[0])
    assert findings["verdict"] in ("leak", "no-leak")
    assert findings["source"] == str(FIXTURES[0])


def test_reading_shows_a_progress_line_on_a_terminal_only(tmp_path):
    import os
    import subprocess
    import sys

    fixture = str(FIXTURES[0])
    env = dict(os.environ, VRAMSCOPE_PROGRESS_AFTER="0")
    out = stderr_on_a_terminal("analyze", fixture, env=env)
    assert b"reading " + fixture.encode() + b"  [####################]  100%" in out
    assert b"\r\x1b[K" in out, "the line is erased when the work is done"
    piped = subprocess.run([sys.executable, "-m", "vramscope", "analyze", fixture], capture_output=True, text=True,
                           env=env)
    assert "reading" not in piped.stderr and "\x1b[" not in piped.stdout, "no progress or colour in a pipe"


def test_run_says_what_happened_when_no_trace_was_written(tmp_path):
    import sys

    crashed = vramscope("run", "-o", str(tmp_path / "t.vscope"), "--", sys.executable, "-c", "raise SystemExit(3)",
                        check_rc=3).stderr
    assert "the command failed (exit code 3) before it wrote a trace" in crashed, crashed
    torch = pytest.importorskip("torch")
    quiet = vramscope("run", "-o", str(tmp_path / "t.vscope"), "--", sys.executable, "-c", "pass").stderr
    if torch.cuda.is_available():
        assert "no trace was written: the command did not use CUDA through torch" in quiet, quiet
    else:
        assert ("no trace was written: the command did not use torch (without CUDA vramscope records the tensors "
                "torch creates, and there were none)") in quiet, quiet


@pytest.mark.parametrize("options, warmup", [((), -1), (("--warmup", "7"), 7), (("--steps", "5:"), 5)])
def test_run_hands_the_analysis_warmup_to_each_capture(options, warmup, tmp_path):
    """Each process's capture reads NVML at the end of the warm-up the analysis will use (the usage
    ledger's context is taken there) and its live monitor skips the same steps."""
    import sys

    said = vramscope("run", "-o", str(tmp_path / "t.vscope"), *options, "--", sys.executable, "-c",
                     "import json, os; print('warmup', json.loads(os.environ['VRAMSCOPE_RUN'])['warmup'])").stdout
    assert f"warmup {warmup}\n" in said, said


def test_the_readme_shows_what_analyze_prints_today():
    """The README's sample is the real output of its command, run where it says (the bundled
    traces name the recording checkout's files relative to it: no machine's paths)."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"```\n\$ cd tests/data && vramscope (analyze [^\n]*)\n(.*?)```", readme, re.S)
    out = subprocess.run([sys.executable, "-m", "vramscope", *block[1].split()], cwd=FIXTURES[0].parent,
                         capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"}).stdout
    assert out == block[2]


def test_bundled_traces_name_the_recording_checkouts_files_relative_to_it():
    """What `demo` and the tests show: tests/data/record_fixtures.py, not the recording machine's
    /work/... path (record_fixtures.py --relativize; new recordings are written so)."""
    from vramscope import _core

    for fixture in FIXTURES:
        ours = {f for f, _, _ in _core.frames(str(fixture)) if f.endswith("record_fixtures.py")}
        assert ours == {"tests/data/record_fixtures.py"}, (fixture.name, ours)


def test_diff_sets_two_runs_side_by_side_from_traces_or_findings(tmp_path):
    """`vramscope diff A B`: the peak by category and the leaks gone or new, whether each side is a
    trace, a snapshot or a findings file."""
    import json
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "data"
    leaking, clean = data / "leak_ctx_losses.pickle.gz", data / "clean_adamw_accum.pickle.gz"
    findings = tmp_path / "clean.json"
    vramscope("analyze", str(clean), "--json", str(findings))
    for b in (clean, findings):
        d = json.loads(vramscope("diff", str(leaking), str(b), "--json", "-").stdout)
        assert d["schema"] == "vramscope.diff"
        assert [l["change"] for l in d["leaks"]] == ["gone", "gone"], d["leaks"]
        (peak,) = d["peaks"]
        assert peak["change"] == peak["b"] - peak["a"] < 0
        assert sum(c["a"] for c in peak["categories"]) == peak["a"]
    text = vramscope("diff", str(data / "peak" / "peak_adamw.vscope"), str(data / "peak" / "peak_adamw_checkpointed.vscope")).stdout
    assert "activations     1.2 GiB      0 B          -1.2 GiB (-100%)" in text, text


@pytest.mark.parametrize("args, said", [
    (("convert", "IN", "/dev/null", "--chunk-size", "4096"), "--chunk-size 4096: give the unit, e.g. 4096KiB, or 4096B"),
    (("analyze", "IN", "--device-memory", "0"), "--device-memory takes a size from 1.0 MiB, such as 80GiB"),
    (("analyze", "IN", "--device-memory", "80XB"), "--device-memory 80XB: unknown unit XB (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"),
    (("analyze", "IN", "--device-memory=-5GiB"), "--device-memory -5GiB: a size is never negative"),
    (("analyze", "IN", "--device-memory", "-5GiB"), "--device-memory -5GiB: a size is never negative"),
])
def test_a_size_error_says_what_would_be_right(args, said):
    """No hint that the option then refuses ("4096GiB" for a chunk, "0GiB"), an unknown unit named."""
    args = [str(FIXTURES[0]) if a == "IN" else a for a in args]
    err = vramscope(*args, check_rc=2).stderr
    assert said in err, err
