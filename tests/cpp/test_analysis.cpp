#include <gtest/gtest.h>

#include <cmath>

#include "analysis/analyze.h"
#include "common/address_map.h"
#include "analysis/steps.h"
#include "trace_builder.h"

using namespace vramscope;
using vramscope::testing::TraceBuilder;

namespace {
constexpr uint64_t MiB = 1 << 20;
constexpr uint64_t kSide = 0x55d0c0ffee00;

struct Loop {
    int steps = 30;
    uint64_t leak_bytes = 0;      // per step, never freed
    uint64_t leak_stream = 0;
    int leak_every = 1;           // leak in every n-th step only
    uint64_t cached_bytes = 0;    // per step, freed 8 steps later (an LRU of 8)
    uint64_t segment_growth = 0;  // reserved added per step while allocated stays flat
    uint64_t lagged_bytes = 0;    // per step, freed two steps later
    enum { markers, annotations, none } steps_from = markers;
};

// A training loop: parameters before the loop, optimizer state in step 0, temporaries freed
// within the step. The leak reuses the address a temporary just released: identity must be the
// allocation, never the address.
Trace loop(const Loop& o) {
    TraceBuilder b;
    const uint32_t params = b.stack({{"/home/u/train.py", 5, "build_model"}});
    const uint32_t state = b.stack({{"/usr/lib/python3.11/site-packages/torch/optim/adamw.py", 90, "_init_group"},
                                    {"/home/u/train.py", 30, "train"}});
    const uint32_t act = b.stack({{"/usr/lib/python3.11/site-packages/torch/nn/functional.py", 10, "linear"},
                                  {"/home/u/model.py", 12, "forward"},
                                  {"/home/u/train.py", 25, "train"}});
    const uint32_t leak = b.stack({{"/home/u/offload.py", 41, "pack"}, {"/home/u/train.py", 25, "train"}});
    const uint32_t cache = b.stack({{"/home/u/cache.py", 8, "remember"}, {"/home/u/train.py", 26, "train"}});
    const uint32_t lag = b.stack({{"/home/u/prefetch.py", 3, "next_batch"}, {"/home/u/train.py", 24, "train"}});
    b.segment(0x1000000000, 256 * MiB);
    b.alloc(0x1000000000, 64 * MiB, params);
    for (int s = 0; s < o.steps; ++s) {
        const uint64_t base = 0x2000000000 + uint64_t(s) * 0x10000000;
        if (o.steps_from == Loop::annotations) b.annotation(EventKind::annotation_start, "Optimizer.step#AdamW.step");
        if (o.lagged_bytes) {
            b.alloc(0x4000000000 + uint64_t(s) * 0x1000000, o.lagged_bytes, lag);
            if (s >= 2) b.free(0x4000000000 + uint64_t(s - 2) * 0x1000000, o.lagged_bytes);
        }
        b.alloc(base, 8 * MiB, act);
        b.alloc(base + 0x800000, 8 * MiB, act);
        b.free(base, 8 * MiB);
        if (o.leak_bytes && s % o.leak_every == 0) b.alloc(base, o.leak_bytes, leak, o.leak_stream);
        b.free(base + 0x800000, 8 * MiB);
        if (o.cached_bytes) {
            b.alloc(0x5000000000 + uint64_t(s) * 0x1000000, o.cached_bytes, cache);
            if (s >= 8) b.free(0x5000000000 + uint64_t(s - 8) * 0x1000000, o.cached_bytes);
        }
        if (o.segment_growth) b.segment(0x6000000000 + uint64_t(s) * 0x10000000, o.segment_growth);
        if (s == 0) b.alloc(0x1800000000, 128 * MiB, state);
        if (o.steps_from == Loop::markers) b.step();
        if (o.steps_from == Loop::annotations) b.annotation(EventKind::annotation_end, "Optimizer.step#AdamW.step");
    }
    return b.t;
}

}  // namespace

TEST(FlatMap, PutGetTakeWithCollisionsAndBackShift) {
    AddressMap m(4);
    for (uint64_t k = 0; k < 5000; ++k) m.put(k * 512, uint32_t(k));
    for (uint64_t k = 0; k < 5000; k += 2) EXPECT_EQ(m.take(k * 512), k);
    for (uint64_t k = 0; k < 5000; ++k) EXPECT_EQ(m.get(k * 512), k % 2 ? uint32_t(k) : AddressMap::kMissing);
    EXPECT_EQ(m.size(), 2500u);
    EXPECT_EQ(m.take(12345), AddressMap::kMissing);
}

TEST(Analysis, LeakOnASideStreamIsFoundWithItsSiteRateAndBlocks) {
    Loop o;
    o.leak_bytes = 2 * MiB;
    o.leak_stream = kSide;
    Findings f = analyze(loop(o));
    EXPECT_EQ(f.verdict, Verdict::leak);
    EXPECT_EQ(f.steps_source, StepsSource::markers);
    EXPECT_EQ(f.step_count, 30u);
    ASSERT_EQ(f.leaks.size(), 1u);
    const SiteFinding& l = f.leaks[0];
    EXPECT_EQ(l.site.file, "/home/u/offload.py");
    EXPECT_EQ(l.site.line, 41u);
    EXPECT_EQ(l.site.function, "pack");
    EXPECT_NEAR(l.bytes_per_step, 2.0 * MiB, 1.0);
    EXPECT_NEAR(f.leak_bytes_per_step, 2.0 * MiB, 1.0);
    EXPECT_EQ(l.stream, kSide);
    EXPECT_EQ(l.first_step, 0u);
    EXPECT_GT(l.confidence, 0.9);
    EXPECT_EQ(l.live_bytes, 30 * 2 * MiB);
    // The last step's block is still in the loop's hands: only blocks a window old are listed.
    ASSERT_EQ(l.live_blocks.size(), 29u);
    // Each leaked block is reported at the address it reused, with its own size.
    EXPECT_EQ(l.live_blocks[5], std::make_pair(uint64_t(0x2000000000 + 5 * 0x10000000ull), 2 * MiB));
    ASSERT_EQ(l.stack.size(), 2u);
    EXPECT_EQ(l.stack[1].function, "train");
    bool side_stream_reported = false;
    for (const StreamUsage& s : f.devices[0].streams)
        if (s.stream == kSide) side_stream_reported = s.leaked_bytes == 30 * 2 * MiB;
    EXPECT_TRUE(side_stream_reported);
}

TEST(Analysis, ALeakEveryTenthStepIsStillALeak) {
    Loop o;
    o.steps = 200;
    o.leak_bytes = 10 * MiB;
    o.leak_every = 10;
    Findings f = analyze(loop(o));
    EXPECT_EQ(f.verdict, Verdict::leak);
    ASSERT_EQ(f.leaks.size(), 1u);
    EXPECT_NEAR(f.leaks[0].bytes_per_step, double(MiB), 0.05 * MiB);
    EXPECT_GT(f.leaks[0].confidence, 0.9);
    EXPECT_NEAR(f.leaks[0].recurrence, 0.1, 0.02);
}

TEST(Analysis, CleanLoopIsNoLeakAndExplainsWarmUp) {
    Findings f = analyze(loop(Loop{}));
    EXPECT_EQ(f.verdict, Verdict::no_leak);
    EXPECT_TRUE(f.leaks.empty());
    ASSERT_FALSE(f.not_leaks.empty());
    const NotLeak& w = f.not_leaks[0];
    EXPECT_EQ(w.kind, NotLeakKind::warm_up);
    EXPECT_EQ(w.bytes, 192 * MiB);
    ASSERT_TRUE(w.site);
    // The optimizer's state is attributed to the user's line that called into torch.
    EXPECT_EQ(w.site->file, "/home/u/train.py");
    EXPECT_EQ(w.site->line, 30u);
    EXPECT_EQ(f.devices[0].timeline.size(), 30u);
    EXPECT_EQ(f.devices[0].timeline[10].allocated, 192 * MiB);
    EXPECT_EQ(f.devices[0].timeline[10].peak_allocated, 208 * MiB);
}

TEST(Analysis, StepsComeFromOptimizerAnnotationsWithoutMarkers) {
    Loop o;
    o.steps_from = Loop::annotations;
    o.leak_bytes = MiB;
    Findings f = analyze(loop(o));
    EXPECT_EQ(f.steps_source, StepsSource::optimizer_annotations);
    EXPECT_EQ(f.steps_detail, "Optimizer.step#AdamW.step");
    EXPECT_EQ(f.step_count, 30u);
    EXPECT_EQ(f.verdict, Verdict::leak);
}

TEST(Analysis, StepsAreInferredFromThePeriodWithoutMarkersOrAnnotations) {
    Loop o;
    o.steps_from = Loop::none;
    o.leak_bytes = MiB;
    Findings f = analyze(loop(o));
    EXPECT_EQ(f.steps_source, StepsSource::inferred_period);
    EXPECT_EQ(f.step_count, 29u);  // the first occurrence opens step 0; the last step is unfinished
    EXPECT_EQ(f.verdict, Verdict::leak);
    ASSERT_FALSE(f.leaks.empty());
    EXPECT_NEAR(f.leaks[0].bytes_per_step, double(MiB), 1.0);
}

TEST(Analysis, BoundedCacheIsNotALeak) {
    Loop o;
    o.cached_bytes = MiB;
    Findings f = analyze(loop(o));
    EXPECT_EQ(f.verdict, Verdict::no_leak);
    bool found = false;
    for (const NotLeak& n : f.not_leaks)
        if (n.kind == NotLeakKind::bounded_cache) {
            found = true;
            EXPECT_EQ(n.bytes, 8 * MiB);  // the eight it keeps at every step's end
            EXPECT_EQ(n.site->file, "/home/u/cache.py");
        }
    EXPECT_TRUE(found);
}

TEST(Analysis, ReservedGrowthWithFlatAllocatedIsFragmentation) {
    Loop o;
    o.segment_growth = 20 * MiB;
    Findings f = analyze(loop(o));
    EXPECT_EQ(f.verdict, Verdict::no_leak);
    bool found = false;
    for (const NotLeak& n : f.not_leaks) found = found || n.kind == NotLeakKind::fragmentation;
    EXPECT_TRUE(found);
}

TEST(Analysis, WindowDecidesWhetherALaggedFreeSurvives) {
    Loop o;
    o.lagged_bytes = MiB;
    Findings one = analyze(loop(o));
    EXPECT_EQ(one.verdict, Verdict::no_leak);  // survives one step but does not accumulate
    AnalysisOptions two;
    two.judge.window = 2;
    Findings f = analyze(loop(o), two);
    EXPECT_EQ(f.verdict, Verdict::no_leak);
    for (const NotLeak& n : f.not_leaks) EXPECT_NE(n.kind, NotLeakKind::bounded_cache) << n.why;
}

TEST(Analysis, ProjectsTheOomStepFromCapacity) {
    Loop o;
    o.leak_bytes = 1024 * MiB;
    AnalysisOptions opt;
    opt.device_memory = 80ull << 30;
    Findings f = analyze(loop(o), opt);
    ASSERT_TRUE(f.projected_oom_step);
    // Peak in the last step: 192 MiB kept + 30 GiB leaked + 16 MiB of temporaries... the leak's
    // own block arrives after one temporary is freed, so the peak is 192 MiB + 30 GiB + 8 MiB.
    const double peak = 192.0 * MiB + 30.0 * 1024 * MiB + 8.0 * MiB;
    const double left = (double(80ull << 30) - peak) / (1024.0 * MiB);
    EXPECT_EQ(*f.projected_oom_step, 29u + uint64_t(std::ceil(left)));
}

TEST(Analysis, AnOomEventGivesTheStepAndTheCapacity) {
    Loop o;
    o.leak_bytes = 1024 * MiB;
    Trace t = loop(o);
    // The allocator ran out in step 20 with 300 MiB free on the device and 256 MiB reserved.
    size_t at = 0, ends = 0;
    while (ends < 20) ends += t.events[at++].kind == EventKind::step;
    Event oom;
    oom.kind = EventKind::oom;
    oom.addr = 300 * MiB;
    oom.size = 1024 * MiB;
    t.events.insert(t.events.begin() + long(at), oom);
    Findings f = analyze(t);
    ASSERT_TRUE(f.devices[0].oom_step);
    EXPECT_EQ(*f.devices[0].oom_step, 20u);
    EXPECT_EQ(f.devices[0].capacity_source, "oom-event");
    EXPECT_EQ(f.devices[0].total_memory, 556 * MiB);
    ASSERT_TRUE(f.projected_oom_step);  // the synthetic run already exceeds it: projected right away
    EXPECT_EQ(*f.projected_oom_step, 29u);
}

TEST(Analysis, TimelineSplitsLiveBytesByStream) {
    Loop o;
    o.leak_bytes = MiB;
    o.leak_stream = kSide;
    Findings f = analyze(loop(o));
    const StepPoint& p = f.devices[0].timeline[9];
    uint64_t side = 0;
    for (const auto& [stream, bytes] : p.by_stream)
        if (stream == kSide) side = bytes;
    EXPECT_EQ(side, 10 * MiB);
}

TEST(Analysis, EachDeviceHasItsTimelineAndTheLeakIsOnItsDevice) {
    Trace both = loop(Loop{});  // clean on device 0
    // Device 1 leaks 4 MiB each step, between the same step markers.
    const uint32_t frame = both.stacks.intern_frame(Frame{both.stacks.intern_string("/home/u/pipeline.py"),
                                                          both.stacks.intern_string("send"), 9});
    const uint32_t stack = both.stacks.intern_stack(0, frame);
    both.device(1);
    for (size_t i = 0, k = 0; i < both.events.size(); ++i) {
        if (both.events[i].kind != EventKind::step) continue;
        Event e;
        e.kind = EventKind::alloc;
        e.device = 1;
        e.addr = 0x9000000000 + k++ * 0x1000000;
        e.size = 4 * MiB;
        e.stack = stack;
        e.time_us = both.events[i].time_us;
        both.events.insert(both.events.begin() + long(i), e);
        ++i;
    }
    Findings f = analyze(both);
    ASSERT_EQ(f.devices.size(), 2u);
    EXPECT_EQ(f.devices[0].timeline.size(), f.devices[1].timeline.size());
    ASSERT_EQ(f.leaks.size(), 1u);
    EXPECT_EQ(f.leaks[0].device, 1);
    EXPECT_EQ(f.leaks[0].site.file, "/home/u/pipeline.py");
    EXPECT_NEAR(f.leaks[0].bytes_per_step, 4.0 * MiB, 1.0);
    EXPECT_EQ(f.devices[1].timeline[9].allocated, 10 * 4 * MiB);
}

TEST(Analysis, TooFewStepsSaysSoInsteadOfGuessing) {
    Loop o;
    o.steps = 4;
    o.leak_bytes = MiB;
    Findings f = analyze(loop(o));
    EXPECT_EQ(f.verdict, Verdict::cannot_judge);
    ASSERT_FALSE(f.notes.empty());
    EXPECT_NE(f.notes[0].find("full steps"), std::string::npos);
}

TEST(Analysis, StepMarkersWinOverAnnotations) {
    Loop o;
    Trace t = loop(o);
    Event marker;
    marker.kind = EventKind::annotation_end;
    marker.name = t.stacks.intern_string("Optimizer.step#SGD.step");
    t.events.insert(t.events.begin() + 3, marker);
    EXPECT_EQ(find_steps(t).source, StepsSource::markers);
}

// A live-tensor capture records from inside a dispatch mode: its frames, and the wrappers torch
// calls it through, are kept in the stack but not shown; it is shown from the op's caller.
TEST(Analysis, ALeakRecordedInsideADispatchModeIsShownFromTheOpsCaller) {
    TraceBuilder b;
    const char* torch = "/usr/lib/python3.11/site-packages/torch/";
    const std::string eval_frame = std::string(torch) + "_dynamo/eval_frame.py", compile = std::string(torch) + "_compile.py";
    const uint32_t kept = b.stack({{"/usr/lib/python3.11/site-packages/vramscope/capture/live_tensors.py", 79, "created"},
                                   {"/usr/lib/python3.11/site-packages/vramscope/capture/live_tensors.py", 35, "__torch_dispatch__"},
                                   {eval_frame.c_str(), 1446, "_fn"},
                                   {compile.c_str(), 54, "inner"},
                                   {"/home/u/train.py", 9, "forward"},
                                   {"/home/u/train.py", 27, "train"}});
    for (uint64_t step = 0; step < 16; ++step) {
        b.alloc(0x1000'0000 + step * MiB, MiB, kept);
        b.step();
    }
    const Findings f = analyze(b.t);
    ASSERT_EQ(f.leaks.size(), 1u);
    EXPECT_EQ(f.leaks[0].site.function, "forward");
    EXPECT_EQ(f.leaks[0].stack.size(), 6u);
    EXPECT_EQ(f.leaks[0].stack_shown_from, 4u);
}

// One line of the user's code over a whole library call (`trainer.evaluate()`): its buffer that
// transformers replaces by a bigger one each batch is a site of its own, split from the model's
// temporaries and a workspace under the same line, with its own stack and rate.
TEST(Analysis, ALibraryFunctionThatGrowsUnderOneUserLineIsASiteOfItsOwn) {
    TraceBuilder b;
    const char* trainer = "/x/site-packages/transformers/trainer.py";
    const uint32_t grows = b.stack({{"/x/site-packages/transformers/trainer_pt_utils.py", 87, "torch_pad_and_concatenate"},
                                    {trainer, 4400, "Trainer.evaluation_loop"}, {"/home/u/eval.py", 88, "main"}});
    const uint32_t temporary = b.stack({{"/x/site-packages/torch/nn/modules/linear.py", 134, "Linear.forward"},
                                        {"/x/site-packages/transformers/models/llama/modeling_llama.py", 175, "LlamaMLP.forward"},
                                        {trainer, 4380, "Trainer.evaluation_loop"}, {"/home/u/eval.py", 88, "main"}});
    const uint32_t workspace = b.stack({{"/x/site-packages/transformers/models/llama/modeling_llama.py", 122,
                                         "LlamaRotaryEmbedding.forward"},
                                        {trainer, 4380, "Trainer.evaluation_loop"}, {"/home/u/eval.py", 88, "main"}});
    b.segment(0x10000000, 1ull << 32);
    b.alloc(0x20000000, 32 << 20, workspace);  // kept from the first batch on
    uint64_t buffer = 0, size = 0;
    for (int batch = 0; batch < 30; ++batch) {
        b.alloc(0x30000000, 8 << 20, temporary);
        const uint64_t bigger = 0x40000000 + uint64_t(batch % 2) * 0x10000000;
        b.alloc(bigger, size + (64 << 10), grows);
        if (buffer) b.free(buffer, size);
        buffer = bigger, size += 64 << 10;
        b.free(0x30000000, 8 << 20);
        b.step();
    }
    const Findings f = analyze(b.t);
    ASSERT_EQ(f.verdict, Verdict::leak);
    ASSERT_EQ(f.leaks.size(), 1u);
    const SiteFinding& leak = f.leaks[0];
    EXPECT_EQ(leak.site.line, 88u);
    ASSERT_TRUE(leak.allocated_in);
    EXPECT_EQ(leak.allocated_in->function, "torch_pad_and_concatenate");
    EXPECT_EQ(leak.stack[leak.stack_shown_from].function, "torch_pad_and_concatenate");
    EXPECT_NEAR(leak.bytes_per_step, 64 << 10, 0.01 * (64 << 10));
    EXPECT_LT(leak.live_bytes, uint64_t(32) << 20);  // the workspace under the same line is not in it
}
