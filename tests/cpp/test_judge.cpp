// The one rule (analysis/judge.h) on the series shapes real runs show, and the proof that the
// live monitor and the offline analysis reach the same answer on the same events.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>
#include <vector>

#include "analysis/analyze.h"
#include "analysis/judge.h"
#include "analysis/live_monitor.h"
#include "analysis/live_sink.h"
#include "analysis/sites.h"
#include "analysis/steps.h"
#include "importers/torch_snapshot.h"
#include "live_sink_feed.h"
#include "recorded_fixtures.h"
#include "trace_builder.h"

using namespace vramscope;
namespace fs = std::filesystem;

namespace {

constexpr double MiB = 1 << 20;

std::vector<double> series(size_t n, double (*f)(size_t)) {
    std::vector<double> v;
    for (size_t i = 0; i < n; ++i) v.push_back(f(i));
    return v;
}

}  // namespace

TEST(Judge, ALineIsALeakAtItsSlope) {
    const auto v = series(30, [](size_t i) { return 100 * MiB + double(i) * 2 * MiB; });
    const Judgement j = judge(v);
    EXPECT_EQ(j.shape, Shape::rising);
    EXPECT_NEAR(j.bytes_per_step, 2 * MiB, 1);
    EXPECT_NEAR(j.recent_bytes_per_step, 2 * MiB, 1);
}

TEST(Judge, AStaircaseEveryFifthStepIsALeak) {
    const auto v = series(40, [](size_t i) { return double(i / 5) * 10 * MiB; });
    EXPECT_TRUE(is_leak(judge(v).shape));
}

TEST(Judge, GrowthThatSlowsButGoesOnIsASlowingLeakNotABound) {
    // The side-stream offload of the seeds: every step adds less, but every step adds.
    const auto v = series(40, [](size_t i) { return 64 * MiB * std::sqrt(double(i + 1)); });
    const Judgement j = judge(v);
    EXPECT_EQ(j.shape, Shape::slowing);
    EXPECT_LT(j.recent_bytes_per_step, j.bytes_per_step);
}

TEST(Judge, ACacheThatFillsAndStaysFlatIsBounded) {
    const auto v = series(40, [](size_t i) { return std::min<double>(double(i), 12) * MiB; });
    EXPECT_EQ(judge(v).shape, Shape::bounded);
}

TEST(Judge, FlatForFewerThanTheTailIsNotYetBounded) {
    // Rose until 3 step ends before the end: flat_tail(40) = 10, so it is not flat long enough.
    const auto v = series(40, [](size_t i) { return std::min<double>(double(i), 36) * MiB; });
    EXPECT_TRUE(is_leak(judge(v).shape));
    EXPECT_EQ(flat_tail(40), 10u);
}

TEST(Judge, TooFewStepsSaySoInsteadOfGuessing) {
    const auto v = series(kMinSteps - 1, [](size_t i) { return double(i) * MiB; });
    EXPECT_EQ(judge(v).shape, Shape::too_short);
}

TEST(Judge, KeptFromWarmUpAndNothingAtAll) {
    EXPECT_EQ(judge(series(20, [](size_t) { return 50 * MiB; })).shape, Shape::warm_up);
    EXPECT_EQ(judge(series(20, [](size_t) { return 0.0; })).shape, Shape::level);
}

TEST(Judge, OneLateAllocationIsNotALeak) {
    const auto v = series(30, [](size_t i) { return i >= 25 ? 8 * MiB : 0.0; });
    EXPECT_EQ(judge(v).shape, Shape::level);
}

TEST(Judge, NoiseAroundALevelIsNeverALeak) {
    // Input-dependent buffers: up and down around 40 MiB, no trend.
    const auto v = series(60, [](size_t i) { return 40 * MiB + double((i * 7919) % 13) * MiB; });
    EXPECT_FALSE(is_leak(judge(v).shape));
}

// The live monitor leaves unjudged a site whose recent step ends are all alike (most sites of a
// training run): it may, because the rule calls nothing without a rise a leak, at any length.
TEST(Judge, StepEndsAllAlikeAreNeverALeak) {
    for (size_t n = 1; n <= kRecentSteps + 8; ++n)
        for (const double held : {0.0, 4096.0, 50 * MiB}) {
            const std::vector<double> v(n, held);
            EXPECT_FALSE(judge_site(v, v, kMinSteps).leaks()) << n << " step ends of " << held;
            EXPECT_FALSE(judge_site(std::vector<double>(n, 0.0), v, kMinSteps).leaks()) << n << " step ends of " << held;
        }
}

// What the monitor says of a site over its life: confirmed while it climbs, withdrawn once it has
// been flat for long enough (it is judged while reported, however steady), confirmed again when it
// climbs again after a steady spell longer than the steps the monitor keeps.
TEST(Judge, LiveMonitorJudgesAgainWhatChangesAfterASteadySpell) {
    LiveMonitor monitor;
    constexpr uint32_t site = 7;
    uint64_t addr = 0x7f0000000000;
    std::vector<std::pair<uint64_t, Shape>> said;  // (step, shape)
    auto step = [&](bool grows) {
        if (grows) monitor.alloc(0, addr += 1 << 20, 1 << 20, site);
        monitor.alloc(0, 0x10000000, 4096, site + 1);  // a batch's buffer: gone by every step end
        monitor.release(0, 0x10000000);
        for (const LiveLeak& l : monitor.end_step()) said.emplace_back(monitor.steps(), l.shape);
    };
    for (int i = 0; i < 30; ++i) step(true);
    for (int i = 0; i < 100; ++i) step(false);
    for (int i = 0; i < 30; ++i) step(true);
    ASSERT_EQ(said.size(), 3u);
    EXPECT_TRUE(is_leak(said[0].second));
    EXPECT_LE(said[0].first, 30u);
    EXPECT_EQ(said[1].second, Shape::bounded);
    EXPECT_GT(said[1].first, 30u);
    EXPECT_LE(said[1].first, 130u);
    EXPECT_TRUE(is_leak(said[2].second));
    EXPECT_GT(said[2].first, 130u);
    ASSERT_EQ(monitor.leaking().size(), 1u);
    EXPECT_EQ(monitor.leaking()[0].site, site);
}

TEST(Judge, OomProjection) {
    EXPECT_EQ(projected_oom_step(10, 100, 40, 20), 13u);
    EXPECT_FALSE(projected_oom_step(10, 0, 40, 20));
    EXPECT_FALSE(projected_oom_step(10, 100, 40, 0));
}

// Every real fixture, its events fed to the live monitor as capture would feed them (the same
// site rule, the same step ends): each site the monitor confirms is a leak of the final table,
// each leak of the table is confirmed live, at rates within 10% of each other. (A site confirmed
// while it climbed and withdrawn later is not in the monitor's last word.)
TEST(Judge, LiveMonitorAndOfflineAnalysisAgreeOnEveryFixture) {
    size_t fixtures = 0;
    for (const fs::path& file : vramscope::testing::recorded_snapshots())
    for (uint32_t window : {1u, 2u}) {  // one JudgeSettings for both, whatever the window
        fixtures += window == 1;
        SCOPED_TRACE(file.filename().string() + " window " + std::to_string(window));
        const Trace t = load_any(file.string());
        AnalysisOptions options;
        options.judge.window = window;
        const Findings f = analyze(t, options);
        const Steps steps = find_steps(t);
        SiteResolver sites(t.stacks);
        LiveMonitor monitor(options.judge);
        std::map<std::pair<uint8_t, uint32_t>, double> live;  // (device, site frame) -> rate
        // A live capture sees no step that ended before its first memory event.
        size_t first_memory_event = 0;
        while (!is_block_event(t.events[first_memory_event].kind)) ++first_memory_event;
        size_t next_end = 0;
        while (next_end < steps.ends.size() && steps.ends[next_end] < first_memory_event) ++next_end;
        for (size_t i = 0; i < t.events.size(); ++i) {
            const Event& ev = t.events[i];
            if (ev.kind == EventKind::alloc) monitor.alloc(ev.device, ev.addr, ev.size, sites.site(ev.stack));
            else if (is_release(ev.kind)) monitor.release(ev.device, ev.addr);
            if (next_end < steps.ends.size() && steps.ends[next_end] == i) {
                ++next_end;
                monitor.end_step();
            }
        }
        for (const LiveLeak& l : monitor.leaking()) live[{l.device, l.site}] = l.bytes_per_step;
        std::map<std::pair<uint8_t, std::string>, double> offline;
        for (const SiteFinding& l : f.leaks)
            offline[{uint8_t(l.device), l.site.file + ":" + std::to_string(l.site.line)}] = l.bytes_per_step;
        std::map<std::pair<uint8_t, std::string>, double> online;
        for (const auto& [key, rate] : live) {
            const Frame& fr = t.stacks.frame(key.second);
            online[{key.first, std::string(t.stacks.string(fr.file)) + ":" + std::to_string(fr.line)}] = rate;
        }
        ASSERT_EQ(online.size(), offline.size());
        for (const auto& [key, rate] : offline) {
            ASSERT_TRUE(online.count(key)) << key.second;
            EXPECT_NEAR(online[key], rate, 0.10 * rate) << key.second;
        }
    }
    EXPECT_GE(fixtures, 5u);
}

// Memory outside torch's allocator too: a synthetic capture's events (a library's device memory
// kept each step at the line where torch's activations come and go, pinned host memory kept each
// step, a cuBLAS workspace taken once) through the live sink, as the recorder hands them over: its
// last word is the offline table's, by device, line and memory, with the library and the rate.
TEST(Judge, LiveSinkAndOfflineAnalysisAgreeOnMemoryOutsideTorch) {
    vramscope::testing::TraceBuilder b;
    const uint32_t params = b.stack({{"/home/u/train.py", 5, "build"}});
    const uint32_t acts = b.stack({{"/home/u/train.py", 30, "train"}});
    const uint32_t kept = b.stack({{"/home/u/train.py", 27, "train"}});
    const uint32_t leaky = b.stack({{"/home/u/build/libleaky.so", 0, "cuMemAlloc_v2"}, {"/home/u/train.py", 30, "train"}});
    const uint32_t pinned = b.stack({{"/v/torch/lib/libtorch_cuda.so", 0, "cuMemHostAlloc"}, {"/home/u/train.py", 40, "train"}});
    const uint32_t cublas = b.stack({{"/v/nvidia/cublas/lib/libcublasLt.so.12", 0, "cuMemAlloc_v2"}, {"/home/u/train.py", 31, "train"}});
    auto outside = [&](EventKind kind, uint64_t addr, uint64_t size, uint32_t stack) {
        Event e;
        e.kind = kind, e.addr = addr, e.size = size, e.stack = stack, e.time_us = b.time += 3;
        b.t.events.push_back(e);
    };
    b.segment(0x7000'0000'0000, 1ull << 30);
    b.alloc(0x7000'0000'0000, 64 * uint64_t(MiB), params);
    for (uint64_t s = 0; s < 40; ++s) {
        b.alloc(0x7000'1000'0000, 8 * uint64_t(MiB), acts);
        b.alloc(0x7000'2000'0000 + s * uint64_t(MiB), uint64_t(MiB), kept);
        outside(EventKind::external_alloc, 0x7100'0000'0000 + s * 4 * uint64_t(MiB), 2 * uint64_t(MiB), leaky);
        outside(EventKind::pinned_alloc, 0x5500'0000'0000 + s * uint64_t(MiB), 512 << 10, pinned);
        if (s == 0) outside(EventKind::external_alloc, 0x7200'0000'0000, 32 * uint64_t(MiB), cublas);
        b.free(0x7000'1000'0000, 8 * uint64_t(MiB));
        b.step();
    }
    const Trace& t = b.t;
    const Findings f = analyze(t);
    ASSERT_EQ(f.leaks.size(), 3u);
    LiveSink sink;
    vramscope::testing::feed_stacks(sink, t.stacks);
    sink.events(t.events);
    std::map<std::tuple<uint16_t, std::string, Memory>, std::pair<std::string, double>> live, offline;
    for (const LiveFinding& l : sink.leaking())
        live[{l.device, l.site.file + ":" + std::to_string(l.site.line), l.memory}] = {l.library, l.bytes_per_step};
    for (const SiteFinding& l : f.leaks)
        offline[{l.device, l.site.file + ":" + std::to_string(l.site.line), l.memory}] = {l.library, l.bytes_per_step};
    ASSERT_EQ(live.size(), offline.size());
    for (const auto& [key, said] : offline) {
        ASSERT_TRUE(live.count(key)) << std::get<1>(key) << " " << name(std::get<2>(key));
        EXPECT_EQ(live[key].first, said.first);
        EXPECT_NEAR(live[key].second, said.second, 0.10 * said.second);
    }
    EXPECT_EQ(offline.count({0, "/home/u/train.py:30", Memory::external}), 1u);
    EXPECT_EQ(offline.count({0, "/home/u/train.py:40", Memory::pinned}), 1u);
}

// Step ends before the first memory event (a capture started before the model reached the GPU)
// are forgotten by the analysis; the live sink forgets them too, so the two number steps alike:
// the same warm-up judged away, the same first step of the climb, as if the run had begun with
// its first allocation.
TEST(Judge, LiveSinkNumbersStepsAsTheAnalysisWhenStepsEndBeforeMemory) {
    auto judged = [](int steps_before_memory) {
        vramscope::testing::TraceBuilder b;
        const uint32_t kept = b.stack({{"/home/u/train.py", 27, "train"}});
        const uint32_t acts = b.stack({{"/home/u/train.py", 30, "train"}});
        for (int s = 0; s < steps_before_memory; ++s) b.step();
        b.segment(0x7000'0000'0000, 1ull << 30);
        for (uint64_t s = 0; s < 40; ++s) {
            b.alloc(0x7000'1000'0000, 8 * uint64_t(MiB), acts);
            if (s >= 10) b.alloc(0x7000'2000'0000 + s * uint64_t(MiB), uint64_t(MiB), kept);  // from step 10 on
            b.free(0x7000'1000'0000, 8 * uint64_t(MiB));
            b.step();
        }
        LiveSink sink;
        vramscope::testing::feed_stacks(sink, b.t.stacks);
        sink.events(b.t.events);
        return std::pair(analyze(b.t), sink.leaking());
    };
    const auto [offline, live] = judged(0);
    const auto [offline_late, live_late] = judged(6);
    ASSERT_EQ(offline.leaks.size(), 1u);
    ASSERT_EQ(offline_late.leaks.size(), 1u);
    ASSERT_EQ(live.size(), 1u);
    ASSERT_EQ(live_late.size(), 1u);
    EXPECT_EQ(offline_late.leaks[0].first_step, offline.leaks[0].first_step);
    EXPECT_EQ(live_late[0].site.line, 27u);
    EXPECT_EQ(live_late[0].since_step, live[0].since_step);
    EXPECT_EQ(live_late[0].projected_oom_step, live[0].projected_oom_step);
    EXPECT_NEAR(live_late[0].bytes_per_step, offline_late.leaks[0].bytes_per_step, 0.05 * offline_late.leaks[0].bytes_per_step);
}

// The live monitor projects the OOM step from the same rate the offline analysis uses: the recent
// slope, which for a leak that slows is below the whole series' slope.
TEST(Judge, LiveOomProjectionUsesTheRecentRateAsOfflineDoes) {
    constexpr uint64_t kCapacity = uint64_t(8) << 30;
    LiveMonitor monitor;
    monitor.set_capacity(0, kCapacity);
    std::vector<double> aged;  // what the monitor judges: bytes a step old or more at each step end
    double kept = 0;
    uint64_t addr = 0x1000'0000;
    for (size_t step = 0; step < 40; ++step) {
        const uint64_t size = uint64_t(64 * MiB / std::sqrt(double(step + 1)));  // growth that slows
        monitor.alloc(0, addr, size, 7);
        addr += size + 4096;
        if (step >= kWarmupSteps) aged.push_back(kept);
        kept += double(size);
        for (const LiveLeak& leak : monitor.end_step()) {
            ASSERT_TRUE(is_leak(leak.shape));
            const Judgement j = judge(aged);
            EXPECT_LT(j.recent_bytes_per_step, j.bytes_per_step);
            // The peak inside the step is what was allocated at its end (nothing was freed).
            EXPECT_EQ(leak.projected_oom_step, projected_oom_step(step + 1, kCapacity, uint64_t(kept), j.recent_bytes_per_step));
            return;
        }
    }
    FAIL() << "the slowing leak was never confirmed";
}

// Memory allocated before capture began (the model, loaded first) counts toward the peak the OOM
// is projected from, and the projection follows the run step by step, not only when a leak is said.
TEST(Judge, LiveOomProjectionCountsMemoryFromBeforeCaptureAndFollowsTheRun) {
    constexpr uint64_t kCapacity = uint64_t(1) << 30;
    constexpr uint64_t kBefore = 512 * MiB, kLeak = 8 * MiB;
    LiveMonitor with_model, without;
    with_model.set_capacity(0, kCapacity, kBefore);
    without.set_capacity(0, kCapacity);
    for (uint64_t step = 0; step < 20; ++step) {
        with_model.alloc(0, 0x1000'0000 + step * kLeak, kLeak, 7);
        without.alloc(0, 0x1000'0000 + step * kLeak, kLeak, 7);
        with_model.end_step();
        without.end_step();
        if (!with_model.projected_oom_step()) continue;
        // The leak's recent rate is the judge's (kLeak a step): the steps left are the room over it.
        const uint64_t held = (step + 1) * kLeak;
        EXPECT_EQ(with_model.projected_oom_step(), projected_oom_step(step + 1, kCapacity, kBefore + held, double(kLeak)));
        EXPECT_EQ(without.projected_oom_step(), projected_oom_step(step + 1, kCapacity, held, double(kLeak)));
    }
    ASSERT_TRUE(with_model.projected_oom_step()) << "the leak was never confirmed";
    EXPECT_EQ(*without.projected_oom_step() - *with_model.projected_oom_step(), kBefore / kLeak);
}

// A setting out of range is refused by name, never silently replaced (analyze(window=0) was 1).
TEST(Judge, SettingsOutOfRangeAreRefusedByName) {
    AnalysisOptions options;
    options.judge.window = 0;
    try {
        analyze(Trace{}, options);
        FAIL() << "window 0 was accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("window"), std::string::npos) << e.what();
    }
    JudgeSettings low;
    low.warmup = -2;
    EXPECT_THROW(LiveMonitor{low}, std::invalid_argument);
}
