// Libraries that sub-allocate from pools of their own (XLA's, CuPy's): the driver's calls show the
// pool's doublings, or a pool taken at once, never its arrays. Where the capture read the library's
// own count (EventKind::pool_usage), that count is judged by the one rule, offline and live alike:
// the leak's rate is what is in use, a pool that grew while nothing more was in use is a cache, and
// the usage ledger splits the library's part into in use and cached.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "analysis/analyze.h"
#include "analysis/live_sink.h"
#include "findings/json.h"
#include "live_sink_feed.h"
#include "trace/reader.h"
#include "trace_builder.h"

using namespace vramscope;
using vramscope::testing::TraceBuilder;

namespace {

constexpr uint64_t MiB = 1 << 20;
constexpr const char* kTrain = "/home/u/train.py";
constexpr const char* kXla = "/v/site-packages/jaxlib/xla_extension.so";
constexpr const char* kCupy = "/v/site-packages/cupy/cuda/memory.cpython-312-x86_64-linux-gnu.so";

// torch's training beside a library that keeps `kept(s)` bytes of arrays at the end of step s in a
// pool that grows as XLA's does: a region as large as the pool so far whenever the arrays and the
// step's temporaries outgrow it (or, `preallocated`, one region of 4 GiB at the start).
struct PoolRun {
    TraceBuilder b;
    uint32_t acts, driver;
    uint64_t pool = 0, next_region = 0x7100'0000'0000;
    const char* library_path;

    explicit PoolRun(const char* library = kXla) : library_path(library) {
        const uint32_t params = b.stack({{kTrain, 5, "build_model"}});
        acts = b.stack({{kTrain, 30, "train"}});
        driver = b.stack({{library, 0, library == kXla ? "cuMemCreate" : "cuMemAlloc_v2"}, {kTrain, 42, "train"}});
        b.segment(0x7000'0000'0000, 1ull << 30);
        b.alloc(0x7000'0000'0000, 64 * MiB, params);
    }
    void region(uint64_t size) {
        Event e;
        e.kind = EventKind::external_alloc, e.addr = next_region, e.size = size, e.stack = driver, e.time_us = b.time += 3;
        b.t.events.push_back(e);
        next_region += size;
        pool += size;
    }
    // `steps` steps; kept(s): the library's bytes in use at step s's end; read: whether its count is read.
    void run(int steps, uint64_t (*kept)(int), bool read = true, bool preallocated = false, const char* name = "JAX/XLA") {
        if (preallocated) region(4096 * MiB);
        for (int s = 0; s < steps; ++s) {
            b.alloc(0x7000'1000'0000, 8 * MiB, acts);
            const uint64_t need = kept(s) + 8 * MiB;  // the step's temporaries on top
            while (need > pool) region(pool ? pool : 32 * MiB);
            b.free(0x7000'1000'0000, 8 * MiB);
            if (read) b.pool(name, kept(s), pool);
            b.step();
        }
    }
};

uint64_t kept_16_mib(int s) { return uint64_t(s + 1) * 16 * MiB; }
uint64_t kept_until_8(int s) { return uint64_t(std::min(s, 8) + 1) * 16 * MiB; }  // a cache that filled by step 8
uint64_t none_kept(int) { return 0; }

void feed_tables(LiveSink& sink, const Trace& t) {
    vramscope::testing::feed_stacks(sink, t.stacks);
    for (const Event& e : t.events)
        if (e.kind == EventKind::pool_usage) sink.name(e.name, t.stacks.string(e.name));
}

}  // namespace

// JAX beside torch keeps 16 MiB a step; XLA's pool doubles (32, 64, 128, ... MiB) and the driver
// sees only that. Judged by the pool's count: the leak is 16 MiB a step, at the line the pool grew at.
TEST(Pools, ALeakInAPoolIsJudgedByItsBytesInUseNotByItsDoublings) {
    PoolRun run;
    run.run(40, kept_16_mib);
    const Findings f = analyze(run.b.t);
    ASSERT_EQ(f.verdict, Verdict::leak);
    ASSERT_EQ(f.leaks.size(), 1u);
    const SiteFinding& l = f.leaks[0];
    EXPECT_EQ(l.evidence, LeakEvidence::pool_in_use);
    EXPECT_EQ(l.memory, Memory::external);
    EXPECT_EQ(l.library, "JAX/XLA");
    EXPECT_EQ(l.site.line, 42u);
    EXPECT_NEAR(l.bytes_per_step, 16.0 * MiB, 0.01 * 16 * MiB);
    EXPECT_NEAR(f.leak_bytes_per_step, 16.0 * MiB, 0.01 * 16 * MiB);
    EXPECT_TRUE(confirmed(l.confidence));
    // Its blocks, the pool's regions, oldest first: what the owner search looks in.
    ASSERT_GE(l.live_blocks.size(), 3u);
    EXPECT_LT(l.live_blocks[0].first, l.live_blocks[1].first);
    // The usage ledger: the library's part, split by its own count.
    bool split = false;
    for (const UsageLedger& u : f.usage)
        for (const LibraryBytes& b : u.libraries)
            if (b.library == "JAX/XLA") {
                split = true;
                ASSERT_TRUE(b.in_use && b.cached);
                EXPECT_EQ(*b.in_use, 40 * 16 * MiB);
                EXPECT_EQ(*b.in_use + *b.cached, b.bytes);
            }
    EXPECT_TRUE(split);
    const std::string json = to_json(f);
    EXPECT_NE(json.find("\"evidence\":\"pool-in-use\""), std::string::npos);
    EXPECT_NE(json.find("\"in_use\":"), std::string::npos);
}

// Without the count, the same run is judged by the driver's calls: the doublings, a rate that is not
// the arrays' (what this change is for).
TEST(Pools, WithoutItsCountThePoolsDoublingsAreAllTheDriverShows) {
    PoolRun run;
    run.run(40, kept_16_mib, false);
    const Findings f = analyze(run.b.t);
    for (const SiteFinding& l : f.leaks) EXPECT_NE(l.evidence, LeakEvidence::pool_in_use);
    for (const UsageLedger& u : f.usage)
        for (const LibraryBytes& b : u.libraries) EXPECT_FALSE(b.in_use);
}

// A pool that grew while what is in use rose to a bound: a cache that filled, said once, not a leak.
TEST(Pools, APoolThatGrewWhileItsArraysStoppedIsACacheThatFilled) {
    PoolRun run;
    run.run(40, kept_until_8);
    const Findings f = analyze(run.b.t);
    EXPECT_EQ(f.verdict, Verdict::no_leak) << (f.notes.empty() ? "" : f.notes[0]);
    EXPECT_TRUE(f.leaks.empty());
}

// A pool taken whole at the start (JAX preallocates 75 % of the device): the driver sees nothing
// grow, the count sees the leak.
TEST(Pools, APoolTakenAtOnceHidesALeakOnlyItsCountShows) {
    PoolRun plain;
    plain.run(40, kept_16_mib, false, true);
    EXPECT_TRUE(analyze(plain.b.t).leaks.empty());
    PoolRun run;
    run.run(40, kept_16_mib, true, true);
    const Findings f = analyze(run.b.t);
    ASSERT_EQ(f.verdict, Verdict::leak);
    ASSERT_EQ(f.leaks.size(), 1u);
    EXPECT_EQ(f.leaks[0].evidence, LeakEvidence::pool_in_use);
    EXPECT_EQ(f.leaks[0].site.line, 42u);
    EXPECT_NEAR(f.leaks[0].bytes_per_step, 16.0 * MiB, 0.01 * 16 * MiB);
}

// A count that does not account for the library's driver memory (CuPy with another allocator set:
// its default pool holds nothing while the driver's calls grow) speaks for none of it: the driver's
// sites are judged as ever.
TEST(Pools, ACountWhosePoolDoesNotHoldTheDriverMemoryIsNotBelieved) {
    PoolRun run(kCupy);
    for (int s = 0; s < 40; ++s) {
        run.region(8 * MiB);  // 8 MiB a step, past the pool
        run.b.pool("CuPy", 0, 0);
        run.b.step();
    }
    const Findings f = analyze(run.b.t);
    ASSERT_EQ(f.leaks.size(), 1u);
    EXPECT_EQ(f.leaks[0].evidence, LeakEvidence::survivors);
    EXPECT_EQ(f.leaks[0].library, "CuPy");
    EXPECT_NEAR(f.leaks[0].bytes_per_step, 8.0 * MiB, 0.01 * 8 * MiB);
}

// The live monitor judges the same count by the same rule: it confirms the same leak, at the same
// line and rate, and never withdraws it when the pool stops doubling; a cache that filled is no
// leak at its last word.
TEST(Pools, TheLiveMonitorAgreesWithTheAnalysisOnAPoolsCount) {
    for (uint64_t (*kept)(int) : {kept_16_mib, kept_until_8, none_kept}) {
        PoolRun run;
        run.run(40, kept);
        const Findings f = analyze(run.b.t);
        LiveSink sink;
        feed_tables(sink, run.b.t);
        std::vector<LiveFinding> said;
        // Step end by step end, as the recorder drains them: nothing said is withdrawn later.
        size_t from = 0;
        for (size_t i = 0; i < run.b.t.events.size(); ++i)
            if (run.b.t.events[i].kind == EventKind::step) {
                sink.events(std::span<const Event>(run.b.t.events).subspan(from, i + 1 - from));
                from = i + 1;
                for (LiveFinding& l : sink.take_said()) said.push_back(std::move(l));
            }
        const std::vector<LiveFinding> live = sink.leaking();
        ASSERT_EQ(live.size(), f.leaks.size());
        if (kept == kept_16_mib)  // the pool's doublings stop, its arrays do not: never withdrawn
            for (const LiveFinding& l : said) EXPECT_TRUE(is_leak(l.shape)) << "withdrawn at " << l.since_step;
        if (f.leaks.empty()) continue;
        EXPECT_EQ(live[0].evidence, LeakEvidence::pool_in_use);
        EXPECT_EQ(live[0].library, "JAX/XLA");
        EXPECT_EQ(live[0].site.line, f.leaks[0].site.line);
        EXPECT_EQ(live[0].site.file, f.leaks[0].site.file);
        EXPECT_NEAR(live[0].bytes_per_step, f.leaks[0].bytes_per_step, 0.01 * f.leaks[0].bytes_per_step);
        // Its blocks, oldest first, for the owner search.
        ASSERT_GE(live[0].newest_blocks.size(), 2u);
        EXPECT_EQ(live[0].newest_blocks[0], f.leaks[0].live_blocks[0]);
    }
}

// The recorded GPU runs (tests/data/real_runs: JAX keeping 16 MiB a step beside torch, its pool
// doubling, or preallocated) replayed through the live sink step end by step end: it confirms the
// leak once, never withdraws it, and its last word is the analysis' (site, rate: 16 MiB a step).
TEST(Pools, TheRecordedJaxRunsAreOneLeakLiveAndOffline) {
    for (const char* name : {"jax_arrays_kept", "jax_prealloc_kept"}) {
        const std::string path = std::string(VRAMSCOPE_TEST_DATA) + "/real_runs/" + name + ".vscope";
        const Trace t = read_trace(path);
        ASSERT_TRUE(t.faults.empty()) << name;
        const Findings f = analyze(t);
        ASSERT_EQ(f.verdict, Verdict::leak) << name;
        ASSERT_FALSE(f.leaks.empty()) << name;
        const SiteFinding& l = f.leaks[0];
        EXPECT_EQ(l.evidence, LeakEvidence::pool_in_use) << name;
        EXPECT_NEAR(l.bytes_per_step, 16.0 * MiB, 0.01 * 16 * MiB) << name;
        LiveSink sink;
        feed_tables(sink, t);
        std::vector<LiveFinding> said;
        size_t from = 0;
        for (size_t i = 0; i < t.events.size(); ++i)
            if (t.events[i].kind == EventKind::step || i + 1 == t.events.size()) {
                sink.events(std::span<const Event>(t.events).subspan(from, i + 1 - from));
                from = i + 1;
                for (LiveFinding& s : sink.take_said()) said.push_back(std::move(s));
            }
        ASSERT_EQ(said.size(), 1u) << name;
        EXPECT_TRUE(is_leak(said[0].shape)) << name;
        const std::vector<LiveFinding> live = sink.leaking();
        ASSERT_EQ(live.size(), f.leaks.size()) << name;
        EXPECT_EQ(live[0].site.line, l.site.line) << name;
        EXPECT_EQ(live[0].evidence, LeakEvidence::pool_in_use) << name;
        EXPECT_NEAR(live[0].bytes_per_step, l.bytes_per_step, 0.01 * l.bytes_per_step) << name;
    }
}
