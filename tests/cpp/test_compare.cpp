// compare/: the status rules against the baseline, and the table read from a compare run whose
// cells' findings are the real fixtures' (recorded on a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "error_of.h"
#include "analysis/analyze.h"
#include "compare/cells.h"
#include "compare/diff.h"
#include "compare/status.h"
#include "compare/table.h"
#include "findings/json.h"
#include "importers/torch_snapshot.h"
#include "trace_builder.h"

using namespace vramscope;
using vramscope::testing::error_of;
namespace fs = std::filesystem;

namespace {

CellResult judged(double rate, Verdict verdict = Verdict::leak, int64_t steps = 30) {
    CellResult c;
    c.outcome = CellOutcome::finished;
    c.analysed = true;
    c.verdict = rate > 0 ? verdict : Verdict::no_leak;
    c.leak_bytes_per_step = rate;
    c.steps = steps;
    return c;
}

TEST(CompareStatus, RatesAgainstTheBaselineGiveEachStatus) {
    const CellResult base = judged(2 << 20);
    EXPECT_EQ(judge_against(base, base).status, CellStatus::baseline);
    EXPECT_EQ(judge_against(judged(0), base).status, CellStatus::fix);
    EXPECT_EQ(judge_against(judged(0.05 * (2 << 20)), base).status, CellStatus::fix);
    EXPECT_EQ(judge_against(judged(0.06 * (2 << 20)), base).status, CellStatus::partial);
    EXPECT_EQ(judge_against(judged(1 << 20), base).status, CellStatus::partial);
    EXPECT_EQ(judge_against(judged(0.81 * (2 << 20)), base).status, CellStatus::no_effect);
    EXPECT_EQ(judge_against(judged(1.19 * (2 << 20)), base).status, CellStatus::no_effect);
    EXPECT_EQ(judge_against(judged(1.2 * (2 << 20)), base).status, CellStatus::worse);
    // Growth saved: the baseline's rate minus this one's, over the baseline's steps.
    EXPECT_DOUBLE_EQ(judge_against(judged(1 << 20), base).saved_bytes, double(1 << 20) * 30);
    EXPECT_EQ(judge_against(judged(1 << 20), base).why, "rate 50% of the baseline's");
}

TEST(CompareStatus, NoLeakInTheBaselineMakesAnyLeakWorse) {
    const CellResult clean = judged(0);
    EXPECT_EQ(judge_against(judged(0), clean).status, CellStatus::no_effect);
    EXPECT_EQ(judge_against(judged(1 << 20), clean).status, CellStatus::worse);
}

// A row that leaves the leak as it was is judged by the peak: seed 001's table is peak per patch.
TEST(CompareStatus, ARowThatLeavesTheLeakAsItWasIsJudgedByThePeakItSaves) {
    constexpr uint64_t MiB = 1 << 20;
    const auto with_peak = [](CellResult c, uint64_t activations, uint64_t rest) {
        c.peak_categories[size_t(PeakCategory::activations)] = activations;
        c.peak_categories[size_t(PeakCategory::parameters)] = rest;
        c.peak_allocated = activations + rest;
        return c;
    };
    for (const double rate : {0.0, double(2 << 20)}) {
        SCOPED_TRACE(rate);
        const CellResult base = with_peak(judged(rate), 1300 * MiB, 700 * MiB);
        const CellJudgement lower = judge_against(with_peak(judged(rate), 100 * MiB, 800 * MiB), base);
        EXPECT_EQ(lower.status, CellStatus::lower_peak);
        EXPECT_EQ(lower.why, "peak -1.1 GiB (-55%), activations -1.2 GiB");
        EXPECT_EQ(judge_against(with_peak(judged(rate), 1400 * MiB, 700 * MiB), base).status, CellStatus::higher_peak);
        // Under max(5 % of the peak, 64 MiB) it did nothing.
        EXPECT_EQ(judge_against(with_peak(judged(rate), 1390 * MiB, 700 * MiB), base).status, CellStatus::no_effect);
    }
    // A fix stays a fix, whatever its peak; a row that leaks more is worse.
    const CellResult leaking = with_peak(judged(2 << 20), 1300 * MiB, 700 * MiB);
    EXPECT_EQ(judge_against(with_peak(judged(0), 100 * MiB, 700 * MiB), leaking).status, CellStatus::fix);
    EXPECT_EQ(judge_against(with_peak(judged(3 << 20), 100 * MiB, 700 * MiB), leaking).status, CellStatus::worse);
}

TEST(CompareStatus, CrashesTimeoutsAndNewOutOfMemoryAreBroken) {
    const CellResult base = judged(2 << 20);
    CellResult crashed = judged(0);
    crashed.outcome = CellOutcome::failed;
    crashed.exit_code = 1;
    EXPECT_EQ(judge_against(crashed, base).status, CellStatus::broken);
    EXPECT_EQ(judge_against(crashed, base).why, "exit code 1");
    CellResult slow = judged(0);
    slow.outcome = CellOutcome::timed_out;
    EXPECT_EQ(judge_against(slow, base).status, CellStatus::broken);
    CellResult oom = judged(2 << 20);
    oom.outcome = CellOutcome::out_of_memory;
    oom.oom_step = 19;
    EXPECT_EQ(judge_against(oom, base).status, CellStatus::broken);
    EXPECT_EQ(judge_against(oom, base).why, "out of memory at step 19");
    CellResult unpatched = judged(0);
    unpatched.outcome = CellOutcome::not_run;
    unpatched.analysed = false;
    unpatched.reason = "patch fix.patch does not apply to 0-trl: ...";
    EXPECT_EQ(judge_against(unpatched, base).status, CellStatus::broken);
}

TEST(CompareStatus, OutOfMemoryLikeTheBaselineIsJudgedByRate) {
    CellResult base = judged(2 << 20);
    base.outcome = CellOutcome::out_of_memory;
    base.oom_step = 19;
    CellResult same = base;
    EXPECT_EQ(judge_against(same, base).status, CellStatus::no_effect);  // changes nothing, dies as the baseline
    CellResult fixed = judged(0);
    EXPECT_EQ(judge_against(fixed, base).status, CellStatus::fix);
    CellResult still_dies = judged(0.01 * (2 << 20));
    still_dies.outcome = CellOutcome::out_of_memory;
    EXPECT_EQ(judge_against(still_dies, base).status, CellStatus::partial);  // a fix lets the run finish
}

TEST(CompareStatus, CannotJudgeIsUnknownNeverNoEffect) {
    CellResult short_run = judged(0);
    short_run.verdict = Verdict::cannot_judge;
    EXPECT_EQ(judge_against(short_run, judged(2 << 20)).status, CellStatus::unknown);
    EXPECT_EQ(judge_against(judged(0), short_run).status, CellStatus::unknown);
}

TEST(CompareStatus, RatesThatAreNotMeasurementsGiveNoStatus) {
    const CellResult base = judged(2 << 20);
    for (double rate : {std::numeric_limits<double>::infinity(), std::nan(""), -1.0}) {
        CellResult odd = judged(0);
        odd.leak_bytes_per_step = rate;
        EXPECT_EQ(judge_against(odd, base).status, CellStatus::unknown) << rate;
        CellResult odd_base = base;
        odd_base.leak_bytes_per_step = rate;
        EXPECT_EQ(judge_against(judged(0), odd_base).status, CellStatus::unknown) << rate;
    }
    CellResult leak_at_zero = judged(0);
    leak_at_zero.verdict = Verdict::leak;  // findings that say LEAK and give no rate
    EXPECT_EQ(judge_against(leak_at_zero, base).status, CellStatus::unknown);
}

TEST(CompareStatus, ACellVramscopeFailedOnIsBrokenWithItsReason) {
    CellResult failed;
    failed.outcome = CellOutcome::error;
    failed.reason = "vramscope could not run this cell: OSError: [Errno 36] File name too long";
    const CellJudgement j = judge_against(failed, judged(2 << 20));
    EXPECT_EQ(j.status, CellStatus::broken);
    EXPECT_EQ(j.why, failed.reason);
}

// A compare run as the runner writes it, each cell's findings from a real fixture.
fs::path write_run(const fs::path& dir, const std::vector<std::pair<std::string, std::string>>& cells) {
    fs::create_directories(dir);
    std::string json = R"({"schema": "vramscope.compare", "schema_version": 1, "command": ["python", "train.py"],
        "steps": 30, "complete": true, "wall_seconds": 12.5, "modes": ["text"], "rows": [)";
    for (size_t i = 0; i < cells.size(); ++i)
        json += std::string(i ? "," : "") + R"({"name": ")" + cells[i].first + R"(", "label": "", "changes": ["X=1"]})";
    json += R"(], "cells": [)";
    for (size_t i = 0; i < cells.size(); ++i) {
        const std::string& input = cells[i].second;  // a snapshot's name, or a file with its extension
        const Findings f = analyze(load_any(std::string(VRAMSCOPE_TEST_DATA) + "/" + input +
                                            (input.find('.') == std::string::npos ? ".pickle.gz" : "")));
        std::ofstream(dir / (cells[i].first + ".json")) << to_json(f);
        json += std::string(i ? "," : "") + R"({"mode": "text", "variant": ")" + cells[i].first +
                R"(", "state": "finished", "rc": 0, "wall_seconds": 3.0, "findings": ")" + cells[i].first +
                R"(.json", "trees": {}})";
    }
    std::ofstream(dir / "compare.json") << json + "]}";
    return dir / "compare.json";
}

TEST(CompareTable, FromRealFindingsTheFixIsNamedAndTheChainSaysWhatRemovesTheLeak) {
    const fs::path dir = fs::path(::testing::TempDir()) / "compare_table";
    const CompareRun run = read_compare(write_run(dir, {{"baseline", "leak_ctx_losses"},
                                                        {"fix", "clean_adamw_accum"},
                                                        {"harmless", "leak_ctx_losses"}}).string());
    ASSERT_EQ(run.cells.size(), 3u);
    EXPECT_NEAR(run.cells[0].leak_bytes_per_step, 2.5 * (1 << 20), 0.1 * (1 << 20));
    const std::string text = render_compare_terminal(run);
    EXPECT_NE(text.find("fix             no leak"), std::string::npos) << text;
    EXPECT_NE(text.find("root-cause fix"), std::string::npos) << text;
    EXPECT_NE(text.find("harmless        LEAK"), std::string::npos) << text;
    EXPECT_NE(text.find("no effect"), std::string::npos) << text;
    EXPECT_NE(text.find("gone with: fix\n"), std::string::npos) << text;  // not `harmless`
    for (size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos; start = end + 1)
        EXPECT_LE(end - start, 100u) << text.substr(start, end - start);
    const std::string md = render_compare_markdown(run);
    EXPECT_NE(md.find("| fix | X=1 | no leak |"), std::string::npos) << md;
    const std::string json = render_compare_json(run);
    EXPECT_NE(json.find(R"("row":"fix","outcome":"finished","verdict":"no-leak")"), std::string::npos) << json;
    EXPECT_NE(render_compare_html(run).find("<tr class=\"fix\">"), std::string::npos);
}

TEST(CompareTable, AMissingCellOrAnUnknownStateIsAnErrorNamingTheFile) {
    const fs::path dir = fs::path(::testing::TempDir()) / "compare_bad";
    fs::path path = write_run(dir, {{"baseline", "clean_varlen"}});
    std::ofstream(path) << R"({"schema": "vramscope.compare", "modes": ["a"], "rows": [{"name": "baseline"}],
        "cells": [{"mode": "a", "variant": "baseline", "state": "exploded"}]})";
    try {
        read_compare(path.string());
        FAIL() << "an unknown state was read";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("compare.json: unknown cell state \"exploded\""), std::string::npos);
    }
    std::ofstream(path) << R"({"schema": "vramscope.compare", "modes": ["a"], "rows": [{"name": "baseline"}], "cells": []})";
    EXPECT_THROW(read_compare(path.string()), std::runtime_error);
}

TEST(CompareTable, NumbersOutOfRangeAreErrorsNamingTheField) {
    const fs::path dir = fs::path(::testing::TempDir()) / "compare_numbers";
    const fs::path path = write_run(dir, {{"baseline", "leak_ctx_losses"}, {"fix", "clean_adamw_accum"}});
    // A cell's findings with a rate past any double: that cell unknown, its reason the field; the rest read.
    std::ofstream(dir / "fix.json") << R"({"verdict": "no-leak", "leak_bytes_per_step": 1e999})";
    const CompareRun run = read_compare(path.string());
    ASSERT_NE(run.cell("text", "fix"), nullptr);
    EXPECT_FALSE(run.cell("text", "fix")->analysed);
    EXPECT_NE(run.cell("text", "fix")->reason.find("fix.json: leak_bytes_per_step: 1e999 is not a number"), std::string::npos)
        << run.cell("text", "fix")->reason;
    EXPECT_EQ(run.cell("text", "fix")->findings_file, (dir / "fix.json").string());
    EXPECT_TRUE(run.cell("text", "baseline")->analysed);
    // compare.json's own numbers: the file is refused, naming the field.
    std::ofstream(path) << R"({"schema": "vramscope.compare", "steps": 1e26, "modes": ["a"], "rows": [{"name": "baseline"}],
        "cells": [{"mode": "a", "variant": "baseline", "state": "finished"}]})";
    EXPECT_NE(error_of([&] { read_compare(path.string()); }).find("compare.json: steps: 1e26 is not a number"), std::string::npos);
    std::ofstream(path) << R"({"schema": "vramscope.compare", "modes": ["a"], "rows": [{"name": "baseline"}],
        "cells": [{"mode": "a", "variant": "baseline", "state": "finished"}, {"mode": "a", "variant": "baseline", "state": "failed"}]})";
    EXPECT_NE(error_of([&] { read_compare(path.string()); }).find("two cells for a/baseline"), std::string::npos);
}

TEST(CompareTable, TextFromTheRunIsNeverMarkupAndLinksAreCellFilesOnly) {
    const fs::path dir = fs::path(::testing::TempDir()) / "compare_injection";
    const CompareRun clean = read_compare(write_run(dir, {{"baseline", "leak_ctx_losses"}}).string());
    CompareRun run = clean;
    const std::string hostile = "<script>alert(1)</script> <img src=x onerror=alert(1)> [a](javascript:alert(1)) `x` \x1b[2J | *b*";
    run.rows[0].label = hostile;
    run.cells[0].report = "javascript:alert(1)";
    run.cells[0].log = "data:text/html,<script>alert(1)</script>";
    const std::string md = render_compare_markdown(run);
    for (const char* raw : {"<script", "<img", "[a](", "\x1b", "`x`", "*b*"})
        EXPECT_EQ(md.find(raw), std::string::npos) << raw << "\n" << md;
    EXPECT_NE(md.find("\\[a\\](javascript:alert(1))"), std::string::npos) << "shown as written: " << md;
    EXPECT_NE(md.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos) << md;
    EXPECT_NE(md.find("\\| \\*b\\*"), std::string::npos) << "a pipe stays in its cell: " << md;
    const std::string page = render_compare_html(run);
    EXPECT_EQ(page.find("href=\"javascript:"), std::string::npos) << page;
    EXPECT_EQ(page.find("href=\"data:"), std::string::npos) << page;
    EXPECT_EQ(page.find("<script"), std::string::npos);
    run.cells[0].report = "cells/default/baseline/report.html";
    EXPECT_NE(render_compare_html(run).find("<a href=\"cells/default/baseline/report.html\">report</a>"), std::string::npos);
}

}  // namespace

// Activation checkpointing leaves no leak to judge; compare says what it saved, in activations
// (the GPU recordings of tests/data/record_peak_fixtures.py).
TEST(CompareTable, CheckpointingIsALowerPeakInActivations) {
    const fs::path dir = fs::path(::testing::TempDir()) / "compare_peak";
    const CompareRun run = read_compare(write_run(dir, {{"baseline", "peak/peak_adamw.vscope"},
                                                        {"checkpointed", "peak/peak_adamw_checkpointed.vscope"}}).string());
    const std::string text = render_compare_terminal(run);
    EXPECT_NE(text.find("lower peak"), std::string::npos) << text;
    EXPECT_NE(text.find("activations -1.2 GiB"), std::string::npos) << text;
    EXPECT_NE(text.find("peak -927.1 MiB (-47%)"), std::string::npos) << text;
}

// Seed 003 (TRL PR 6241): an activation offload whose storage-dedupe map outlived the tensors it
// named kept new activations on the GPU at reused addresses; its fix releases each key when its
// tensor goes. Compare says what the fix saved, in activations (tests/data/record_peak_fixtures.py).
TEST(CompareTable, TheOffloadDedupeFixIsALowerPeakInActivations) {
    const fs::path dir = fs::path(::testing::TempDir()) / "compare_offload";
    const CompareRun run = read_compare(write_run(dir, {{"baseline", "peak/offload_dedupe_bug.vscope"},
                                                        {"fixed", "peak/offload_dedupe_fixed.vscope"}}).string());
    const std::string text = render_compare_terminal(run);
    EXPECT_NE(text.find("lower peak"), std::string::npos) << text;
    EXPECT_NE(text.find("activations -160.0 MiB"), std::string::npos) << text;
}

// `vramscope diff`: two runs side by side, from the GPU's AdamW recordings and two snapshots.
TEST(Diff, CheckpointingShowsThePeakItSavesInActivations) {
    const std::string data = VRAMSCOPE_TEST_DATA;
    const RunDiff d = diff_runs(analyze(load_any(data + "/peak/peak_adamw.vscope")),
                                analyze(load_any(data + "/peak/peak_adamw_checkpointed.vscope")));
    ASSERT_EQ(d.peaks.size(), 1u);
    const PeakDiff& p = d.peaks.front();
    EXPECT_GT(p.a, p.b);
    const size_t act = size_t(PeakCategory::activations), params = size_t(PeakCategory::parameters);
    EXPECT_GT(p.a_categories[act], 1ull << 30);
    EXPECT_EQ(p.b_categories[act], 0u);
    EXPECT_EQ(p.a_categories[params], p.b_categories[params]);
    EXPECT_TRUE(d.leaks.empty());
    EXPECT_NE(render_diff_terminal(d, false).find("activations     1.2 GiB      0 B          -1.2 GiB (-100%)"), std::string::npos)
        << render_diff_terminal(d, false);
    // By module: the Blocks' forwards held the activations; checkpointed, they hold a layer's at a time.
    ASSERT_FALSE(p.modules.empty());
    EXPECT_EQ(p.modules.front().module, "Block");
    EXPECT_GT(p.modules.front().a, p.modules.front().b + (900ull << 20));
    EXPECT_NE(render_diff_terminal(d, false).find("module Block"), std::string::npos);
    const std::string json = render_diff_json(d);
    EXPECT_NE(json.find(R"("schema":"vramscope.diff")"), std::string::npos);
    EXPECT_NE(render_diff_html(d).find(R"(<tr data-category="activations">)"), std::string::npos);
}

TEST(Diff, LeaksAreGoneNewOrChanged) {
    const std::string data = VRAMSCOPE_TEST_DATA;
    const Findings leaking = analyze(load_any(data + "/leak_ctx_losses.pickle.gz"));
    const Findings clean = analyze(load_any(data + "/clean_adamw_accum.pickle.gz"));
    const RunDiff fixed = diff_runs(leaking, clean);
    ASSERT_EQ(fixed.leaks.size(), 2u);
    for (const LeakDiff& l : fixed.leaks) EXPECT_EQ(l.change, LeakChange::gone);
    const RunDiff broke = diff_runs(clean, leaking);
    for (const LeakDiff& l : broke.leaks) EXPECT_EQ(l.change, LeakChange::added);
    const RunDiff same = diff_runs(leaking, leaking);
    for (const LeakDiff& l : same.leaks) EXPECT_EQ(l.change, LeakChange::same);
    Findings faster = leaking;
    faster.leaks.front().bytes_per_step *= 2;
    EXPECT_EQ(diff_runs(leaking, faster).leaks.front().change, LeakChange::changed);
}

TEST(Diff, APeakOfLiveTensorsIsTheCpus) {
    vramscope::testing::TraceBuilder b;
    b.t.meta["device.0"] = "cpu";  // as a live-tensor capture names the host's memory
    for (int step = 0; step < 12; ++step) {
        b.alloc(0x7f0000000000ull + uint64_t(step) * 32768, 32768, 0);
        b.step();
    }
    const Findings f = analyze(b.t);
    const RunDiff d = diff_runs(f, f);
    ASSERT_EQ(d.peaks.size(), 1u);
    EXPECT_EQ(d.peaks[0].device_name, "cpu");
    EXPECT_NE(render_diff_terminal(d, false).find("Peak cpu\n"), std::string::npos);
    EXPECT_NE(render_diff_html(d).find("<h2>Peak, cpu</h2>"), std::string::npos);
}
