"""The HTML report in a real browser (Debian's chromium driven by Playwright, headless, offline):
the chart is drawn, the verdict and leak rows are there, no console errors. Screenshots go to
build/artifacts/ for a person to look at."""

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES, truth, vramscope

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "artifacts"
playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright (scripts/test.sh does)")

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs chromium (apt-get install chromium)")


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


def opened(browser, page_file):
    """The page loaded and drawn, with the list its scripts' errors go to."""
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_file.as_uri())
    page.wait_for_selector(".banner")
    return page, errors


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name.split(".")[0])
def test_report_renders_offline_with_verdict_chart_and_leaks(fixture, tmp_path, browser):
    page_file = tmp_path / "report.html"
    vramscope("report", str(fixture), "-o", str(page_file), "--device-memory", "80GiB")
    assert page_file.stat().st_size < 2_000_000
    expected = truth(fixture)["expected"]

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors, requests = [], []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: not r.url.startswith("file:") and requests.append(r.url))
    page.goto(page_file.as_uri())
    page.wait_for_selector(".banner")

    banner = page.inner_text(".banner")
    assert banner.startswith("LEAK" if expected["verdict"] == "leak" else "NO LEAK"), banner
    points = page.get_attribute(".chart polyline.allocated", "points")
    assert points and len(points.split()) >= 20, "the allocated line has a point per step"
    if expected["verdict"] == "leak":
        assert page.locator(".leak-area").count() >= 1
        rows = page.locator("table.leaks tr.leakrow")
        assert rows.count() >= 1
        site = expected["leak_site"]
        assert f"{site['file']}:{site['line']} {site['function']}" in rows.first.inner_text()
        rows.first.click()
        assert page.locator("table.leaks tr.stack.open").count() == 1, "a row expands to its stack"
        assert "OOM projected at step" in banner
        if expected.get("shape") == "slowing":
            assert "slowing" in rows.first.inner_text()
    page.hover(".chart svg", position={"x": 500, "y": 150})
    assert page.locator(".tip").is_visible(), "hovering shows the values"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"report-{fixture.name.split('.')[0]}.png"), full_page=True)
    assert errors == [], errors
    assert requests == [], "the report must not touch the network"
    page.close()


def test_report_of_a_live_trace_shows_who_holds_the_leak(tmp_path, browser):
    """A live capture leaves TRACE.owners.json beside its trace; the report puts each owner under
    its leak."""
    import json

    from vramscope import _core

    trace = tmp_path / "live.vscope"
    recorder = _core.Recorder(str(trace))
    recorder.activate()
    for step in range(30):
        _core.feed_allocator_event(_core.EventKind.alloc, 0, 0x7000_0000 + step * (1 << 20), 1 << 20)
        recorder.end_step()
    recorder.deactivate()
    recorder.close()
    findings = json.loads(_core.summary(str(trace))[1])
    leak = findings["leaks"][0]
    owner = "train() local 'history'[29]  → Tensor 1.0 MiB f32 [262144] cuda:0"
    (tmp_path / "live.vscope.owners.json").write_text(json.dumps([  # as owners/leaks.py explained() writes it
        {"site": leak["site"], "device": leak["device"], "bytes_per_step": leak["bytes_per_step"],
         "owners": [{"path": "train() local 'history'[29]", "root": "train() local 'history'", "edges": ["[29]"],
                     "target": "Tensor 1.0 MiB f32 [262144] cuda:0", "kind": "reachable"}], "owner_lines": [owner]}]))
    page_file = tmp_path / "live.html"
    vramscope("report", str(trace), "-o", str(page_file))
    page = browser.new_page()
    page.goto(page_file.as_uri())
    page.wait_for_selector("table.leaks")
    assert "held by " + " ".join(owner.split()) in page.inner_text("table.leaks tr.leakrow")
    page.close()


def test_report_of_a_findings_json(tmp_path, browser):
    fixture = next(f for f in FIXTURES if truth(f)["expected"]["verdict"] == "leak")
    findings = tmp_path / "findings.json"
    vramscope("analyze", str(fixture), "--json", str(findings))
    page_file = tmp_path / "from-json.html"
    vramscope("report", str(findings), "-o", str(page_file))
    page, errors = opened(browser, page_file)
    assert page.inner_text(".banner").startswith("LEAK")
    assert len(page.get_attribute(".chart polyline.allocated", "points").split()) >= 20
    assert page.locator("table.leaks tr.leakrow").count() >= 1
    assert errors == []
    page.close()


def test_a_run_of_many_bounded_caches_shows_the_largest_and_counts_the_rest(tmp_path, browser):
    """The page draws the largest entries of each kind (findings/shown.h: 40 of a kind) and one
    line for the others; the findings JSON keeps them all."""
    fixture = next(f for f in FIXTURES if truth(f)["expected"]["verdict"] == "leak")
    findings = tmp_path / "findings.json"
    vramscope("analyze", str(fixture), "--json", str(findings))
    data = json.loads(findings.read_text())
    data["not_leaks"] = [{"kind": "bounded-cache", "bytes": 1000 + k, "why": f"cache {k}", "device": 0,
                          "site": {"file": "cache.py", "line": k, "function": "f"}} for k in range(100)]
    findings.write_text(json.dumps(data))
    page_file = tmp_path / "many.html"
    vramscope("report", str(findings), "-o", str(page_file))
    page, errors = opened(browser, page_file)
    rows = page.locator("table.notleaks tbody tr").all_inner_texts()
    assert len(rows) == 40 and rows[-1].endswith("cache 99") and rows[0].endswith("cache 60"), rows
    rest = page.inner_text(".rest")
    assert rest == "and 60 more bounded-cache sites, 60.3 KiB in all (the findings JSON lists them)", rest
    assert errors == []
    page.close()


def test_a_run_too_short_to_judge_says_so_in_the_page(tmp_path, browser):
    short = tmp_path / "short.vscope"
    from vramscope import _core

    recorder = _core.Recorder(str(short))
    recorder.activate()
    for step in range(5):  # five steps: fewer than warm-up plus the judge's minimum
        _core.feed_allocator_event(_core.EventKind.alloc, 0, 0x7000_0000 + step * (1 << 20), 1 << 20)
        recorder.end_step()
    recorder.deactivate()
    recorder.close()
    page_file = tmp_path / "short.html"
    vramscope("report", str(short), "-o", str(page_file))
    page = browser.new_page()
    page.goto(page_file.as_uri())
    banner = page.inner_text(".banner")
    assert banner.startswith("CANNOT JUDGE") and "full steps" in banner, banner


def test_a_live_tensor_capture_is_drawn_as_the_cpu_without_a_reserved_line(tmp_path, browser):
    torch = pytest.importorskip("torch")
    from vramscope.capture import Capture, Source

    kept = []
    with Capture(tmp_path / "cpu.vscope", source=Source.live_tensors, summary=False, live_warnings=False,
                 explain=False) as capture:
        for _ in range(12):
            kept.append(torch.ones(64, 64))
            capture.explicit_step()
    page_file = tmp_path / "cpu.html"
    vramscope("report", capture.path, "-o", str(page_file))
    gpu_file = tmp_path / "gpu.html"
    vramscope("report", str(FIXTURES[0]), "-o", str(gpu_file))
    page = browser.new_page()
    page.goto(page_file.as_uri())
    page.wait_for_selector(".chart")
    assert page.locator("h2", has_text="Memory per step · cpu").count() == 1
    assert page.locator(".chart polyline.reserved").count() == 0
    assert "reserved" not in page.locator(".chart .legend span").all_inner_texts()
    assert "cpu\tgrowth, step 0" in page.inner_text("table.ledger")
    assert "cuda:" not in page.inner_text("body")
    page.goto(gpu_file.as_uri())
    page.wait_for_selector(".chart")
    assert page.locator("h2", has_text="Memory per step · cuda:0").count() == 1
    assert page.locator(".chart polyline.reserved").count() == 1
    assert "reserved" in page.locator(".chart .legend span").all_inner_texts()
    page.close()


HOSTILE = Path(__file__).resolve().parents[1] / "data" / "hostile"


@pytest.mark.parametrize("source", ["hostile_names.pickle.gz", "findings_hostile_strings.json"])
def test_report_of_hostile_strings_is_drawn_and_shows_them_as_text(source, tmp_path, browser):
    """Names with <!--<script>, </script>, U+2028 and control characters (tests/data/hostile): the
    page still draws itself, shows them as text, and runs nothing of theirs."""
    page_file = tmp_path / "hostile.html"
    vramscope("report", str(HOSTILE / source), "-o", str(page_file))
    page = browser.new_page()
    errors, dialogs = [], []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(page_file.as_uri())
    page.wait_for_selector(".banner")
    assert page.inner_text(".banner").startswith("LEAK"), "the page is drawn, not blank"
    assert page.locator("table.leaks tr.leakrow").count() >= 1
    text = page.text_content("#app")  # the stacks too, folded away or not
    assert "<!--<script>" in text and "</script><script>" in text, "hostile names appear as text"
    assert errors == [] and dialogs == []
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"report-hostile-{source.split('.')[0]}.png"), full_page=True)
    page.close()


def test_the_chart_shows_the_step_range_the_reader_picks(tmp_path, browser):
    fixture = next(f for f in FIXTURES if f.name.startswith("leak_ctx_losses"))
    page_file = tmp_path / "report.html"
    vramscope("report", str(fixture), "-o", str(page_file))
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_file.as_uri())
    page.wait_for_selector(".chart polyline.allocated")
    whole = len(page.get_attribute(".chart polyline.allocated", "points").split())
    page.fill(".step-from", "10")
    page.fill(".step-to", "19")
    page.dispatch_event(".step-to", "change")
    assert len(page.get_attribute(".chart polyline.allocated", "points").split()) == 10 < whole
    labels = page.text_content(".chart svg")
    assert "step 10" in labels and "step 19" in labels
    assert page.locator(".leak-area").count() >= 1, "the leak's area is drawn over the range too"
    assert errors == [], errors
    page.close()


def test_report_of_a_step_range_draws_every_step_of_it(tmp_path, browser):
    fixture = next(f for f in FIXTURES if f.name.startswith("leak_ctx_losses"))
    page_file = tmp_path / "report.html"
    vramscope("report", str(fixture), "--steps", "10:19", "-o", str(page_file))
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(page_file.as_uri())
    page.wait_for_selector(".chart polyline.allocated")
    assert len(page.get_attribute(".chart polyline.allocated", "points").split()) == 10
    assert page.input_value(".step-from") == "10" and page.input_value(".step-to") == "19"
    assert "20 steps, one per optimizer step (" in page.inner_text("body"), "the run is read up to step 19's end"
    page.close()


MiB = 1 << 20


def findings_outside_torch() -> dict:
    """A findings JSON (as `analyze --json` writes it) of a run whose leaks are outside torch's
    allocator: an extension's device memory and torch's pinned host memory, NVML read at most step
    ends, and the usage ledger at the last."""
    steps = range(20)
    external = [(512 + 2 * s) * MiB for s in steps]
    nvml = [None if s % 5 == 4 else 1024 * MiB + external[s] + 520 * MiB for s in steps]
    timeline = [{"step": s, "device": 0, "allocated": 900 * MiB, "reserved": 1024 * MiB, "peak_allocated": 950 * MiB,
                 "pending_free": 0, "by_stream": [], "external": external[s], "pinned": (64 + s) * MiB,
                 "nvml_used": nvml[s], "complete": 1} for s in steps]
    leak = {"bytes_per_step": 2.0 * MiB, "site": {"file": "/home/u/train.py", "line": 42, "function": "step"},
            "memory": "external", "library": "leaky_ext.so",
            "stack": [{"file": "/home/u/build/leaky_ext.so", "line": 0, "function": "cuMemAlloc_v2"},
                      {"file": "/home/u/train.py", "line": 42, "function": "step"}],
            "stack_shown_from": 0, "shape": "rising", "evidence": "survivors", "recent_bytes_per_step": 2.0 * MiB,
            "device": 0, "stream": 0, "stream_kind": "default", "first_step": 3, "confidence": 0.98, "fit_r2": 1.0,
            "recurrence": 1.0, "share_of_growth": 0.0, "live_bytes": 40 * MiB, "peak_bytes": 40 * MiB,
            "surviving_allocations": 20, "live_blocks": []}
    pinned = dict(leak, site={"file": "/home/u/train.py", "line": 50, "function": "stage"}, memory="pinned",
                  library="torch", bytes_per_step=1.0 * MiB,
                  stack=[{"file": "/torch/lib/libtorch_cuda.so", "line": 0, "function": "cuMemHostAlloc"},
                         {"file": "/home/u/train.py", "line": 50, "function": "stage"}])
    usage = [{"device": 0, "step": 19, "nvml_used": 2094 * MiB, "torch_reserved": 1024 * MiB,
              "libraries": [{"library": "leaky_ext.so", "bytes": 40 * MiB, "growth": 32 * MiB},
                            {"library": "NCCL", "bytes": 510 * MiB, "growth": 0}],
              "context": 516 * MiB, "page_rounding": 4 * MiB, "unexplained": 0},
             {"device": None, "step": 19, "nvml_used": None, "torch_reserved": 0,
              "libraries": [{"library": "torch", "bytes": 83 * MiB, "growth": 16 * MiB}], "context": None,
              "unexplained": None}]
    return {"schema": "vramscope.findings", "schema_version": 1, "source": "/runs/train.vscope", "format": "vscope",
            "verdict": "leak", "leak_bytes_per_step": 3.0 * MiB, "events": 1000,
            "steps": {"count": 20, "source": "markers", "detail": "vramscope step markers", "unit": "optimizer step",
                      "warmup": 3, "before_trace": 0, "window": 1},
            "projected_oom_step": 40000, "timeline": timeline,
            "devices": [{"device": 0, "total_memory": 80 << 30, "capacity_source": "trace",
                         "projected_oom_step": 40000, "oom_step": None, "streams": []}],
            "leaks": [leak, pinned], "not_leaks": [], "ledger": [], "usage": usage, "notes": [], "warnings": [],
            "input_faults": [], "meta": {"capture.driver": "cupti", "capture.nvml": "on"},
            "import_seconds": 0, "analysis_seconds": 0}


def test_report_shows_memory_outside_torch_its_libraries_and_nvml(tmp_path, browser):
    import json

    findings = tmp_path / "outside.json"
    findings.write_text(json.dumps(findings_outside_torch()))
    page_file = tmp_path / "outside.html"
    vramscope("report", str(findings), "-o", str(page_file))
    page = browser.new_page(viewport={"width": 1280, "height": 1400})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.goto(page_file.as_uri())
    page.wait_for_selector(".banner")

    rows = page.locator("table.leaks tr.leakrow")
    assert "device memory from leaky_ext.so (cuMemAlloc_v2, outside torch's allocator)" in rows.nth(0).inner_text()
    assert "pinned host memory (torch's host allocator)" in rows.nth(1).inner_text()
    assert "host" in rows.nth(1).locator(".tag").inner_text(), "host memory has no stream"
    rows.first.click()
    stack = page.inner_text("table.leaks tr.stack.open")
    assert "cuMemAlloc_v2 /home/u/build/leaky_ext.so\n" in stack, "a library's frame has no line"

    assert page.locator(".chart .external-area").count() == 1, "libraries' device memory stacked on reserved"
    assert len(page.get_attribute(".chart polyline.pinned", "points").split()) == 20
    assert len(page.get_attribute(".chart polyline.nvml", "points").split()) == 16, "a point where NVML was read"
    legend = page.inner_text(".legend")
    assert "libraries' device memory" in legend and "pinned host memory" in legend and "NVML" in legend
    width = page.locator(".chart svg").bounding_box()["width"]
    at_step = lambda s: {"x": width * (70 + 896 * s / 19) / 1000, "y": 150}  # the chart's margins, in its 1000 units
    page.hover(".chart svg", position=at_step(18))
    tip = page.inner_text(".tip")
    assert "outside torch's allocator 548.0 MiB" in tip and "NVML: the process uses 2.0 GiB" in tip, tip
    page.hover(".chart svg", position=at_step(19))
    assert "NVML" not in page.inner_text(".tip"), "NVML was not read in step 19"

    usage = page.inner_text("table.usage")
    for words in ["cuda:0\tNVML, step 19's end\t2.0 GiB", "torch reserved\t1.0 GiB",
                  "leaky_ext.so\t40.0 MiB\t+32.0 MiB", "NCCL\t510.0 MiB", "CUDA context and modules\t516.0 MiB",
                  "the driver's 2 MiB pages of the libraries' allocations since warm-up, beyond their bytes\t4.0 MiB",
                  "host\tpinned, step 19's end\t83.0 MiB", "torch\t83.0 MiB\t+16.0 MiB"]:
        assert words in usage, (words, usage)

    page.fill(".step-from", "5")
    page.fill(".step-to", "14")
    page.dispatch_event(".step-to", "change")
    assert page.locator(".chart .external-area").count() == 1, "the range keeps the series outside torch"
    assert len(page.get_attribute(".chart polyline.nvml", "points").split()) == 8
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "report-outside-torch.png"), full_page=True)
    assert errors == [], errors
    page.close()


@pytest.mark.parametrize("name", ["peak_adamw", "within_step_ctx"])
def test_the_peak_is_a_bar_stacked_by_category_with_its_sites(name, tmp_path, browser):
    """The GPU recordings of tests/data/record_peak_fixtures.py: one bar per device, its categories
    in proportion to their bytes (they sum to the peak), the largest sites below it; a leak inside a
    step has its own table and banner."""
    trace = Path(__file__).resolve().parents[1] / "data" / "peak" / f"{name}.vscope"
    page_file = tmp_path / "report.html"
    vramscope("report", str(trace), "-o", str(page_file))
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_file.as_uri())
    page.wait_for_selector("svg.peakbar")
    widths = {r.get_attribute("data-category"): float(r.get_attribute("width"))
              for r in page.locator("svg.peakbar rect").all()}
    assert abs(sum(widths.values()) - 1000) < 0.01, widths
    assert page.locator("table.peaksites tbody tr").count() >= 3
    if name == "peak_adamw":
        assert max(widths, key=widths.get) == "activations", widths
    else:
        assert max(widths, key=widths.get) == "leaks", widths
        assert "per microbatch" in page.inner_text(".banner")
        assert "record_peak_fixtures.py" in page.inner_text("table.withinstep")
    page.screenshot(path=str(ARTIFACTS / f"report-peak-{name}.png"), full_page=True)
    assert errors == [], errors
    page.close()
