// Every byte of growth accounted for (analysis/ledger.h): growth by replacement is a leak, a
// batch in hand that varies is not, growth no rule explains is never "no leak", and on any trace
// the ledger's parts sum to the measured growth.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "analysis/analyze.h"
#include "analysis/ledger.h"
#include "render/terminal.h"
#include "importers/torch_snapshot.h"
#include "recorded_fixtures.h"
#include "trace_builder.h"

using namespace vramscope;
using vramscope::testing::TraceBuilder;

namespace {
constexpr uint64_t KiB = 1 << 10, MiB = 1 << 20;

// What every ledger must satisfy, whatever the trace: the parts sum to the growth measured at
// the step ends, and "no leak" stands beside no more unexplained growth than it allows.
void expect_ledger_holds(const Findings& f) {
    for (const DeviceLedger& l : f.ledger) {
        SCOPED_TRACE("cuda:" + std::to_string(l.device));
        EXPECT_EQ(std::accumulate(l.parts.begin(), l.parts.end(), int64_t(0)), l.growth);
        EXPECT_EQ(int64_t(l.allocated_to) - int64_t(l.allocated_from), l.growth);
        const DeviceSummary* d = nullptr;
        for (const DeviceSummary& s : f.devices)
            if (s.device == l.device) d = &s;
        ASSERT_NE(d, nullptr);
        EXPECT_EQ(d->timeline[l.from_step].allocated, l.allocated_from);
        EXPECT_EQ(d->timeline[l.to_step].allocated, l.allocated_to);
        EXPECT_EQ(l.unexplained_allowed, unexplained_allowance(l.growth));
        if (f.verdict == Verdict::no_leak) EXPECT_LE(l.part(LedgerPart::unexplained), l.unexplained_allowed);
    }
    if (f.verdict == Verdict::no_leak) EXPECT_FALSE(f.ledger.empty());
}

// An evaluation loop that concatenates each batch's outputs to all before: every step frees the
// old buffer and allocates one a batch bigger, so no block outlives its step.
Trace eval_concat(int steps, uint64_t batch) {
    TraceBuilder b;
    const uint32_t model = b.stack({{"/home/u/eval.py", 5, "load_model"}});
    const uint32_t act = b.stack({{"/home/u/model.py", 12, "forward"}, {"/home/u/eval.py", 20, "evaluate"}});
    const uint32_t concat = b.stack({{"/home/u/eval.py", 22, "evaluate"}});
    b.alloc(0x1000000000, 64 * MiB, model);
    for (int s = 0; s < steps; ++s) {
        b.alloc(0x2000000000, 4 * MiB, act);
        b.free(0x2000000000, 4 * MiB);
        const uint64_t at = 0x3000000000 + uint64_t(s % 2) * 0x100000000;
        b.alloc(at, batch * uint64_t(s + 1), concat);
        if (s > 0) b.free(0x3000000000 + uint64_t((s - 1) % 2) * 0x100000000, batch * uint64_t(s));
        b.step();
    }
    return b.t;
}
}  // namespace

TEST(Ledger, ABufferReplacedByABiggerOneEveryStepIsALeak) {
    const Findings f = analyze(eval_concat(30, 256 * KiB));
    ASSERT_EQ(f.verdict, Verdict::leak);
    ASSERT_EQ(f.leaks.size(), 1u);
    const SiteFinding& l = f.leaks.front();
    EXPECT_EQ(l.site.line, 22u);
    EXPECT_EQ(l.evidence, LeakEvidence::replaced_bigger);
    EXPECT_NEAR(l.bytes_per_step, double(256 * KiB), 0.10 * double(256 * KiB));
    EXPECT_EQ(l.surviving_allocations, 0u);
    EXPECT_EQ(l.first_step, 1u);
    EXPECT_FALSE(l.live_blocks.empty());  // the buffer in hand: what explain maps to a tensor
    ASSERT_EQ(f.ledger.size(), 1u);
    EXPECT_EQ(f.ledger[0].part(LedgerPart::leak), f.ledger[0].growth);
    expect_ledger_holds(f);
}

// A length curriculum: the batch held across the step end grows with its input on average, but
// gives back whenever a shorter one comes. Variation, not a leak.
TEST(Ledger, ABatchInHandThatGrowsWithItsInputIsVariationNotALeak) {
    TraceBuilder b;
    const uint32_t model = b.stack({{"/home/u/train.py", 5, "build"}});
    const uint32_t input = b.stack({{"/home/u/train.py", 30, "train"}});
    b.alloc(0x1000000000, 64 * MiB, model);
    std::mt19937 rng(7);
    uint64_t previous = 0;
    for (int s = 0; s < 30; ++s) {
        const uint64_t hi = 128 + 384 * uint64_t(s) / 29;
        const uint64_t size = std::uniform_int_distribution<uint64_t>(hi / 3, hi)(rng) * 8 * KiB;
        const uint64_t at = 0x2000000000 + uint64_t(s % 2) * 0x100000000;
        b.alloc(at, size, input);
        if (s > 0) b.free(0x2000000000 + uint64_t((s - 1) % 2) * 0x100000000, previous);
        previous = size;
        b.step();
    }
    const Findings f = analyze(b.t);
    EXPECT_EQ(f.verdict, Verdict::no_leak);
    EXPECT_TRUE(f.leaks.empty());
    ASSERT_EQ(f.ledger.size(), 1u);
    EXPECT_EQ(f.ledger[0].part(LedgerPart::variation), f.ledger[0].growth);
    expect_ledger_holds(f);
}

// A block kept from the last step on: too late for any rule to call it a leak, a cache or
// warm-up. The verdict cannot be "no leak"; it says how much and where.
TEST(Ledger, GrowthNoRuleExplainsIsNeverNoLeak) {
    TraceBuilder b;
    const uint32_t model = b.stack({{"/home/u/train.py", 5, "build"}});
    const uint32_t late = b.stack({{"/home/u/train.py", 44, "checkpoint"}});
    b.alloc(0x1000000000, 64 * MiB, model);
    for (int s = 0; s < 30; ++s) {
        if (s == 28) b.alloc(0x5000000000, 16 * MiB, late);
        b.step();
    }
    const Findings f = analyze(b.t);
    EXPECT_EQ(f.verdict, Verdict::cannot_judge);
    ASSERT_EQ(f.ledger.size(), 1u);
    EXPECT_EQ(f.ledger[0].part(LedgerPart::unexplained), int64_t(16 * MiB));
    ASSERT_EQ(f.ledger[0].unexplained_sites.size(), 1u);
    EXPECT_EQ(f.ledger[0].unexplained_sites[0].site.line, 44u);
    ASSERT_FALSE(f.notes.empty());
    EXPECT_NE(f.notes.front().find("16.0 MiB of the 16.0 MiB growth"), std::string::npos) << f.notes.front();
    EXPECT_NE(f.notes.front().find("train.py:44"), std::string::npos) << f.notes.front();
    expect_ledger_holds(f);
}

// Random loops: sites that keep, cache, replace and free blocks of random sizes, on two devices,
// with memory from before the trace given back. Whatever the verdict, the ledger balances.
TEST(Ledger, PartsSumToTheGrowthOnRandomTraces) {
    std::mt19937_64 rng(20261125);
    size_t judged = 0, no_leaks = 0, leaks = 0;
    for (int trial = 0; trial < 400; ++trial) {
        TraceBuilder b;
        std::vector<uint32_t> sites;
        const int n_sites = 1 + int(rng() % 6);
        for (int k = 0; k < n_sites; ++k)
            sites.push_back(b.stack({{"/home/u/train.py", uint32_t(10 + k), "train"}}));
        const bool before_trace = rng() % 3 == 0;
        if (before_trace) b.t.device(0).baseline_allocated = 32 * MiB;
        struct Block { uint64_t addr, size; uint8_t device; };
        std::vector<Block> live;
        uint64_t next = 0x1000000000;
        const int steps = 5 + int(rng() % 40);
        for (int s = 0; s < steps; ++s) {
            const int events = int(rng() % 12);
            for (int e = 0; e < events; ++e) {
                const uint64_t size = (1 + rng() % 512) * 4 * KiB * (rng() % 4 == 0 ? uint64_t(s + 1) : 1);
                if (rng() % 2 == 0 || live.empty()) {
                    const uint8_t device = uint8_t(rng() % 5 == 0);
                    Event& ev = (b.alloc(next, size, sites[rng() % sites.size()]), b.t.events.back());
                    ev.device = device;
                    live.push_back({next, size, device});
                    next += size + 4096;
                } else {
                    const size_t k = rng() % live.size();
                    b.free(live[k].addr, live[k].size);
                    b.t.events.back().device = live[k].device;
                    live.erase(live.begin() + ptrdiff_t(k));
                }
            }
            if (before_trace && s == steps / 2) b.free(0x900000000, 8 * MiB);  // a block from before the trace
            b.step();
        }
        const Findings f = analyze(b.t);
        SCOPED_TRACE("trial " + std::to_string(trial));
        expect_ledger_holds(f);
        judged += !f.ledger.empty();
        no_leaks += f.verdict == Verdict::no_leak;
        leaks += f.verdict == Verdict::leak;
        if (!before_trace)
            for (const DeviceLedger& l : f.ledger) EXPECT_EQ(l.part(LedgerPart::before_trace), 0);
    }
    // The property was tried on every kind of verdict, not on a corner.
    EXPECT_GT(judged, 200u);
    EXPECT_GT(no_leaks, 20u);
    EXPECT_GT(leaks, 20u);
}

// The recorded fixtures with events dropped at random (frees lost, allocations lost): damage the
// analysis must survive with a ledger that still balances.
TEST(Ledger, PartsSumToTheGrowthOnDamagedRecordings) {
    std::mt19937_64 rng(7);
    size_t fixtures = 0;
    for (const auto& file : vramscope::testing::recorded_snapshots()) {
        ++fixtures;
        const Trace recorded = load_any(file.string());
        expect_ledger_holds(analyze(recorded));
        for (int trial = 0; trial < 6; ++trial) {
            Trace t = recorded;
            const uint64_t drop_one_in = 4 + rng() % 60;
            std::erase_if(t.events, [&](const Event& e) { return is_block_event(e.kind) && rng() % drop_one_in == 0; });
            SCOPED_TRACE(file.filename().string() + " trial " + std::to_string(trial));
            expect_ledger_holds(analyze(t));
        }
    }
    EXPECT_GE(fixtures, 5u);
}

TEST(Ledger, TheAllowanceIsAMebibyteOrTwoPercent) {
    EXPECT_EQ(unexplained_allowance(0), int64_t(MiB));
    EXPECT_EQ(unexplained_allowance(10 * MiB), int64_t(MiB));
    EXPECT_EQ(unexplained_allowance(1000 * MiB), int64_t(20 * MiB));
    EXPECT_EQ(unexplained_allowance(-1000 * int64_t(MiB)), int64_t(20 * MiB));
}

// trainer.evaluate() under one line of the user's code: the buffer transformers concatenates the
// predictions into is replaced by a bigger one every step, while a forward's temporary under the
// same line is its latest allocation. The leak shows the stack of the buffer that grows, and names
// the library function that allocates it.
TEST(Ledger, AReplacedBuffersStackIsTheOneThatGrowsAndNamesItsLibraryFunction) {
    TraceBuilder b;
    const char* pt_utils = "/venv/lib/python3.12/site-packages/transformers/trainer_pt_utils.py";
    const uint32_t concat = b.stack({{pt_utils, 133, "torch_pad_and_concatenate"},
                                     {"/venv/lib/python3.12/site-packages/transformers/trainer.py", 4410, "evaluation_loop"},
                                     {"/home/u/train.py", 88, "main"}});
    const uint32_t rotary = b.stack({{"/venv/lib/python3.12/site-packages/transformers/models/llama/modeling_llama.py", 122, "forward"},
                                     {"/home/u/train.py", 88, "main"}});
    b.segment(0x1000000000, 1ull << 34);
    uint64_t held = 0, size = 0;
    for (int s = 0; s < 30; ++s) {
        const uint64_t next = 0x2000000000 + uint64_t(s) * 0x10000000;
        size += 256 * KiB;
        b.alloc(next, size, concat);
        if (held) b.free(held, size - 256 * KiB);
        held = next;
        b.alloc(next + 0x8000000, 64 * KiB, rotary);
        b.free(next + 0x8000000, 64 * KiB);
        b.step();
    }
    const Findings f = analyze(b.t);
    ASSERT_EQ(f.leaks.size(), 1u);
    const SiteFinding& l = f.leaks.front();
    EXPECT_EQ(l.site.line, 88u);
    EXPECT_EQ(l.evidence, LeakEvidence::replaced_bigger);
    ASSERT_FALSE(l.stack.empty());
    EXPECT_EQ(l.stack[l.stack_shown_from].function, "torch_pad_and_concatenate");
    ASSERT_TRUE(l.allocated_in.has_value());
    EXPECT_EQ(l.allocated_in->file, pt_utils);
    EXPECT_EQ(l.allocated_in->line, 133u);
    std::string summary = render_summary(f, false);
    std::replace(summary.begin(), summary.end(), '\n', ' ');
    EXPECT_NE(summary.find("allocated in transformers trainer_pt_utils.py:133 torch_pad_and_concatenate, called "
                           "from your        line 88"),
              std::string::npos)
        << summary;
}
