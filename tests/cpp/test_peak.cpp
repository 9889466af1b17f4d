// The peak, every byte named (analysis/peak.h), and growth inside a step (analysis/within_step.h):
// categories from lifetimes and the phases the markers set, summing to the peak on any trace; a
// microbatch that keeps something until its step ends is a leak, a clean accumulation is not.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "analysis/analyze.h"
#include "analysis/live_monitor.h"
#include "analysis/sites.h"
#include "analysis/steps.h"
#include "findings/json.h"
#include "findings/json_reader.h"
#include "render/export.h"
#include "render/terminal.h"
#include "recorded_fixtures.h"
#include "trace_builder.h"

using namespace vramscope;
using vramscope::testing::TraceBuilder;

namespace {
constexpr uint64_t MiB = 1 << 20;

const DevicePeak& peak_of(const Findings& f) {
    EXPECT_EQ(f.peaks.size(), 1u);
    return f.peaks.front();
}

void expect_peak_holds(const Findings& f) {
    for (const DevicePeak& p : f.peaks) {
        EXPECT_EQ(std::accumulate(p.categories.begin(), p.categories.end(), uint64_t(0)), p.bytes);
        uint64_t highest = 0;
        for (const DeviceSummary& d : f.devices)
            if (d.device == p.device)
                for (const StepPoint& s : d.timeline) highest = std::max(highest, s.peak_allocated);
        EXPECT_EQ(p.bytes, highest) << "cuda:" << p.device;
    }
}

// A training loop as a capture marks it: parameters before the first marker; per microbatch a
// forward (activations saved, a temporary), a backward (gradients once, kept; a temporary; the
// activations freed), then an optimizer step (its state once, kept; a temporary).
struct Loop {
    TraceBuilder b;
    uint32_t params = b.stack({{"/home/u/train.py", 5, "build_model"}});
    uint32_t act = b.stack({{"/home/u/model.py", 12, "forward"}, {"/home/u/train.py", 25, "train"}});
    uint32_t fwd_tmp = b.stack({{"/home/u/model.py", 14, "forward"}, {"/home/u/train.py", 25, "train"}});
    uint32_t grad = b.stack({{"/home/u/train.py", 26, "train"}});
    uint32_t bwd_tmp = b.stack({{"/home/u/train.py", 27, "train"}});
    uint32_t state = b.stack({{"/usr/lib/python3/site-packages/torch/optim/adam.py", 90, "step"}, {"/home/u/train.py", 30, "train"}});
    uint32_t kept = b.stack({{"/home/u/train.py", 28, "train"}});
    uint32_t workspace = b.stack({{"/usr/lib/python3/site-packages/torch/nn/modules/linear.py", 134, "forward"},
                                  {"/home/u/train.py", 25, "train"}});
    uint32_t gathered = b.stack({{"/usr/lib/python3/site-packages/transformers/trainer_pt_utils.py", 77, "torch_pad_and_concatenate"},
                                 {"/home/u/train.py", 40, "train"}});
    uint64_t next = 0x2000000000;
    bool mark_first_forward = false;  // as a capture does; the first forward then keeps a workspace
    // An evaluation before each step but the first, as a Trainer runs one every few steps: per
    // batch, what it has gathered is replaced by one batch's `eval_keep` bigger (all_preds
    // concatenated onto), all freed as the evaluation ends.
    int eval_batches = 0;
    uint64_t eval_keep = 0;

    void evaluate() {
        uint64_t preds = 0, size = 0;
        for (int e = 0; e < eval_batches; ++e) {
            b.free(alloc(2 * MiB, fwd_tmp), 2 * MiB);
            const uint64_t bigger = alloc(size + eval_keep, gathered);
            if (preds) b.free(preds, size);
            preds = bigger, size += eval_keep;
            b.annotation(EventKind::microbatch, "eval batch");
        }
        if (preds) b.free(preds, size);
    }

    uint64_t alloc(uint64_t size, uint32_t stack) {
        b.alloc(next, size, stack);
        return (next += size + 4096) - size - 4096;
    }
    // keep: bytes each microbatch keeps until its step's end (seed 002's losses).
    void run(int steps, int microbatches, uint64_t keep = 0, bool backward_marked = true) {
        b.segment(0x1000000000, 1ull << 34);
        alloc(64 * MiB, params);
        if (mark_first_forward) {
            b.annotation(EventKind::annotation_start, std::string(kFirstForwardAnnotation).c_str());
            alloc(32 * MiB, workspace);
        }
        bool first = true;
        for (int s = 0; s < steps; ++s) {
            if (s > 0) evaluate();
            std::vector<uint64_t> losses;
            uint64_t grads = 0;
            for (int m = 0; m < microbatches; ++m) {
                const uint64_t a1 = alloc(8 * MiB, act), a2 = alloc(8 * MiB, act);
                b.free(alloc(MiB, fwd_tmp), MiB);
                if (keep) losses.push_back(alloc(keep, kept));
                if (backward_marked) b.annotation(EventKind::annotation_start, std::string(kBackwardAnnotation).c_str());
                if (!grads) grads = alloc(64 * MiB, grad);
                b.free(alloc(2 * MiB, bwd_tmp), 2 * MiB);
                b.free(a1, 8 * MiB);
                b.free(a2, 8 * MiB);
                b.annotation(EventKind::microbatch, "backward");
            }
            b.annotation(EventKind::annotation_start, "Optimizer.step#Adam.step");
            if (first) alloc(32 * MiB, state), first = false;
            b.free(alloc(4 * MiB, state), 4 * MiB);
            b.step();
            b.free(grads, 64 * MiB);  // zero_grad(set_to_none=True), in the next step's forward
            for (uint64_t l : losses) b.free(l, keep);
        }
    }
};
}  // namespace

TEST(Peak, EveryByteOfATrainingStepsPeakIsInItsCategory) {
    Loop loop;
    loop.run(12, 1);
    const Findings f = analyze(loop.b.t);
    expect_peak_holds(f);
    const DevicePeak& p = peak_of(f);
    // Highest in the second step's backward: the state the first optimizer step made is kept, the
    // activations wait for the backward, the gradients and a temporary are new.
    EXPECT_EQ(p.bytes, (64 + 32 + 16 + 64 + 2) * MiB);
    EXPECT_EQ(p.step, 1u);
    EXPECT_EQ(p.phase, Phase::backward);
    EXPECT_TRUE(p.backward_marked);
    EXPECT_EQ(p.category(PeakCategory::parameters), 64 * MiB);
    EXPECT_EQ(p.category(PeakCategory::optimizer_state), 32 * MiB);
    EXPECT_EQ(p.category(PeakCategory::activations), 16 * MiB);
    EXPECT_EQ(p.category(PeakCategory::gradients), 64 * MiB);
    EXPECT_EQ(p.category(PeakCategory::temporaries), 2 * MiB);
    EXPECT_EQ(p.category(PeakCategory::other), 0u);
    ASSERT_FALSE(p.sites.empty());
    EXPECT_EQ(p.sites.front().bytes, 64 * MiB);
}

// Perfetto's counter per category draws every block by the peak's rule: at the sample of the
// highest moment, each category is the peak's.
TEST(Peak, PerfettosCategoryCountersAtThePeakAreThePeaksCategories) {
    Loop loop;
    loop.run(12, 1);
    for (size_t i = 0; i < loop.b.t.events.size(); ++i) loop.b.t.events[i].time_us = int64_t(i) * 1000;  // each change drawn
    const Findings f = analyze(loop.b.t);
    const DevicePeak& p = peak_of(f);
    const std::string text = to_perfetto_json(loop.b.t, f);
    const JsonValue json = parse_json(text, "perfetto", kMaxJsonDepth);
    const JsonValue* highest = nullptr;
    uint64_t highest_total = 0;
    size_t samples = 0;
    for (const JsonValue& e : json.get("traceEvents")->items) {
        if (e.get("name")->str != "cuda:0 by category") continue;
        ++samples;
        uint64_t total = 0;
        for (const JsonValue& v : e.get("args")->items) total += std::stoull(std::string(v.text));
        if (total > highest_total) highest_total = total, highest = &e;
    }
    ASSERT_GT(samples, 100u);
    ASSERT_NE(highest, nullptr);
    EXPECT_EQ(highest_total, p.bytes);
    for (size_t c = 0; c < kPeakCategories; ++c) {
        if (PeakCategory(c) == PeakCategory::before_trace) continue;
        const JsonValue* v = highest->get("args")->get(name(PeakCategory(c)));
        ASSERT_NE(v, nullptr) << name(PeakCategory(c));
        EXPECT_EQ(std::stoull(std::string(v->text)), p.categories[c]) << name(PeakCategory(c));
    }
}

// With module paths recorded (a capture's opt-in), two instances of one class are told apart, a
// module's own bytes go to the innermost module open, and a block allocated outside any call falls
// back to the class its stack names.
TEST(Peak, ModulePathsTellInstancesOfOneClassApart) {
    TraceBuilder b;
    const uint32_t mlp = b.stack({{"/usr/lib/python3/site-packages/torch/nn/modules/linear.py", 134, "Linear.forward"},
                                  {"/home/u/model.py", 40, "MLP.forward"},
                                  {"/home/u/train.py", 25, "train"}});
    const uint32_t loose = b.stack({{"/home/u/model.py", 60, "Net.forward"}, {"/home/u/train.py", 25, "train"}});
    b.segment(0x1000000000, 1ull << 32);
    const std::string net = std::string(kModuleAnnotationPrefix) + "Net";
    const std::string layer0 = std::string(kModuleAnnotationPrefix) + "Net.layers.0.mlp";
    const std::string layer1 = std::string(kModuleAnnotationPrefix) + "Net.layers.1.mlp";
    b.annotation(EventKind::annotation_start, net.c_str());
    b.annotation(EventKind::annotation_start, layer0.c_str());
    b.alloc(0x1000000000, 16 * MiB, mlp);
    b.annotation(EventKind::annotation_end, layer0.c_str());
    b.annotation(EventKind::annotation_start, layer1.c_str());
    b.alloc(0x1002000000, 32 * MiB, mlp);
    b.annotation(EventKind::annotation_start, layer1.c_str());  // a call that raised: never closed
    b.annotation(EventKind::annotation_end, layer1.c_str());
    b.annotation(EventKind::annotation_end, layer1.c_str());
    b.alloc(0x1004000000, 8 * MiB, loose);
    b.annotation(EventKind::annotation_end, net.c_str());
    b.alloc(0x1006000000, 4 * MiB, mlp);  // outside any call: its stack's class
    b.step();
    const Findings f = analyze(b.t);
    const DevicePeak& p = peak_of(f);
    ASSERT_EQ(p.modules.size(), 4u);
    EXPECT_EQ(p.modules[0].module, "Net.layers.1.mlp");
    EXPECT_EQ(p.modules[0].bytes, 32 * MiB);
    EXPECT_EQ(p.modules[1].module, "Net.layers.0.mlp");
    EXPECT_EQ(p.modules[2].module, "Net");
    EXPECT_EQ(p.modules[3].module, "MLP");
    EXPECT_EQ(p.module, "MLP");  // the allocation that made the peak
}

TEST(Peak, BytesAreToldByTheModuleWhoseForwardAllocatedThem) {
    TraceBuilder b;
    // A Linear's output inside the model's MLP is the MLP's; a bare Linear's is Linear's.
    const uint32_t mlp = b.stack({{"/usr/lib/python3/site-packages/torch/nn/modules/linear.py", 134, "Linear.forward"},
                                  {"/usr/lib/python3/site-packages/torch/nn/modules/module.py", 1790, "Module._call_impl"},
                                  {"/home/u/model.py", 40, "build.<locals>.MLP.forward"},
                                  {"/home/u/train.py", 25, "train"}});
    const uint32_t bare = b.stack({{"/usr/lib/python3/site-packages/torch/nn/modules/linear.py", 134, "Linear.forward"}, {"/home/u/train.py", 26, "train"}});
    const uint32_t none = b.stack({{"/home/u/train.py", 27, "train"}});
    b.segment(0x1000000000, 1ull << 32);
    b.alloc(0x1000000000, 48 * MiB, mlp);
    b.alloc(0x1004000000, 16 * MiB, none);
    b.alloc(0x1008000000, 32 * MiB, bare);
    b.step();
    const Findings f = analyze(b.t);
    const DevicePeak& p = peak_of(f);
    ASSERT_EQ(p.modules.size(), 3u);
    EXPECT_EQ(p.modules[0].module, "MLP");
    EXPECT_EQ(p.modules[0].bytes, 48 * MiB);
    EXPECT_EQ(p.modules[1].module, "Linear");
    EXPECT_EQ(p.modules[2].module, "");  // outside any module's forward
    EXPECT_EQ(p.module, "Linear");       // the allocation that made the peak
    // A torch snapshot names functions without their class: the file stands in; torch's own
    // non-module forwards (autograd Functions, compiled wrappers) are no module.
    EXPECT_EQ(module_of(b.t.stacks, b.stack({{"/x/site-packages/transformers/models/llama/modeling_llama.py", 9, "forward"}})),
              "forward in modeling_llama.py");
    EXPECT_EQ(module_of(b.t.stacks, b.stack({{"/x/site-packages/torch/_functorch/_aot_autograd/runtime_wrappers.py", 9, "forward"}})),
              "");
}

TEST(Peak, WithoutBackwardMarkersActivationsAreTemporariesAndSaidSo) {
    Loop loop;
    loop.run(12, 1, 0, false);
    const Findings f = analyze(loop.b.t);
    expect_peak_holds(f);
    const DevicePeak& p = peak_of(f);
    EXPECT_FALSE(p.backward_marked);
    EXPECT_EQ(p.category(PeakCategory::activations), 0u);
    EXPECT_EQ(p.category(PeakCategory::optimizer_state), 32 * MiB);
}

// A torch snapshot marks no backward: the autograd engine's allocations, made where no Python frame
// runs, say where each begins, and the next allocation with Python frames where it ends.
TEST(Peak, WithoutMarkersBackwardsAreInferredFromTheAutogradEnginesAllocations) {
    Loop loop;
    loop.grad = loop.b.stack({{"??", 0, "torch::autograd::Engine::evaluate_function"}});
    loop.bwd_tmp = loop.b.stack({});
    loop.run(12, 1, 0, false);
    const Findings f = analyze(loop.b.t);
    expect_peak_holds(f);
    const DevicePeak& p = peak_of(f);
    EXPECT_FALSE(p.backward_marked);
    EXPECT_TRUE(p.backward_inferred);
    EXPECT_EQ(p.phase, Phase::backward);
    EXPECT_EQ(p.category(PeakCategory::gradients), 64 * MiB);
    EXPECT_EQ(p.category(PeakCategory::activations), 16 * MiB);
    EXPECT_EQ(p.category(PeakCategory::temporaries), 2 * MiB);
}

TEST(Peak, MemoryFromBeforeTheTraceIsItsOwnCategory) {
    Loop loop;
    loop.b.t.device(0).baseline_allocated = 100 * MiB;
    loop.run(12, 1);
    const Findings f = analyze(loop.b.t);
    expect_peak_holds(f);
    EXPECT_EQ(peak_of(f).category(PeakCategory::before_trace), 100 * MiB);
}

// Seed 002's pattern: each microbatch's loss kept until the step ends. One optimizer step of 24
// microbatches is enough; no step end shows it.
TEST(WithinStep, AMicrobatchThatKeepsMemoryUntilItsStepEndsIsALeakInsideTheStep) {
    for (int steps : {1, 4}) {
        Loop loop;
        loop.run(steps, 24, 8 * MiB);
        const Findings f = analyze(loop.b.t);
        SCOPED_TRACE(steps);
        ASSERT_EQ(f.within_step.size(), 1u);
        const WithinStepLeak& l = f.within_step.front();
        EXPECT_EQ(f.verdict, Verdict::leak);
        EXPECT_EQ(l.site.line, 28u);
        EXPECT_NEAR(l.bytes_per_unit, 8.0 * MiB, 0.01 * MiB);
        EXPECT_EQ(l.units_per_step, 24u);
        EXPECT_EQ(l.steps_seen, uint64_t(steps));
        EXPECT_EQ(l.bytes_added, 24 * 8 * MiB);
        EXPECT_TRUE(f.leaks.empty());  // nothing survives a step end
        expect_peak_holds(f);
        EXPECT_EQ(peak_of(f).category(PeakCategory::leaks), 24 * 8 * MiB);
    }
}

// The live monitor judges a step's units by the same rule: asked as each optimizer step begins (the
// step's last unit ended, what each microbatch kept still live), it names the site and rate the
// offline analysis gives, with the blocks this step kept for the owner search; a clean
// accumulation, nothing.
TEST(WithinStep, TheLiveMonitorFindsTheSameLeakInsideTheStepAtItsHighestPoint) {
    for (uint64_t keep : {8 * MiB, uint64_t(0)}) {
        Loop loop;
        loop.run(2, 24, keep);
        const Findings offline = analyze(loop.b.t);
        LiveMonitor live;
        std::vector<std::vector<LiveLeak>> asked;
        SiteResolver sites(loop.b.t.stacks);
        for (const Event& e : loop.b.t.events) {
            if (e.kind == EventKind::alloc) live.alloc(e.device, e.addr, e.size, sites.site(e.stack));
            else if (is_release(e.kind)) live.release(e.device, e.addr);
            else if (e.kind == EventKind::microbatch) live.end_unit(e.name);
            else if (e.kind == EventKind::annotation_start && loop.b.t.stacks.string(e.name).starts_with("Optimizer.step#"))
                asked.push_back(live.rising_in_step());
            else if (e.kind == EventKind::step) live.end_step();
        }
        ASSERT_EQ(asked.size(), 2u);
        SCOPED_TRACE(keep);
        for (const std::vector<LiveLeak>& rising : asked) {
            ASSERT_EQ(rising.size(), offline.within_step.size());
            if (rising.empty()) continue;
            EXPECT_EQ(source_line(loop.b.t.stacks, rising[0].site).line, offline.within_step[0].site.line);
            EXPECT_DOUBLE_EQ(rising[0].bytes_per_step, offline.within_step[0].bytes_per_unit);
            EXPECT_EQ(rising[0].newest_blocks.size(), LiveMonitor::kBlocksKept);
            EXPECT_EQ(rising[0].newest_blocks[0].second, keep);
        }
    }
}

// HF Trainer's evaluation without eval_accumulation_steps, run between optimizer steps: what it
// gathers grows per eval batch and is freed as it ends. Its batches are the units, judged apart
// from the step's microbatches before or after them, which keep their own leak.
TEST(WithinStep, AnEvaluationInsideTrainingThatGathersPerBatchIsALeakPerEvalBatch) {
    for (uint64_t keep : {uint64_t(0), 8 * MiB}) {
        Loop loop;
        loop.eval_batches = 16, loop.eval_keep = MiB;
        loop.run(4, 24, keep);
        const Findings f = analyze(loop.b.t);
        SCOPED_TRACE(keep);
        EXPECT_EQ(f.verdict, Verdict::leak);
        ASSERT_EQ(f.within_step.size(), keep ? 2u : 1u);
        for (const WithinStepLeak& l : f.within_step) {
            const bool eval = l.unit == "eval batch";
            EXPECT_EQ(l.site.line, eval ? 40u : 28u);
            EXPECT_NEAR(l.bytes_per_unit, eval ? double(MiB) : 8.0 * MiB, 0.01 * MiB);
            EXPECT_EQ(l.units_per_step, eval ? 16u : 24u);
            EXPECT_EQ(l.steps_seen, eval ? 3u : 4u);
            if (eval) EXPECT_EQ(l.stack.front().function, "torch_pad_and_concatenate");
            else EXPECT_EQ(l.unit, kMicrobatchUnit);
        }
        expect_peak_holds(f);
        // In the last microbatch, as each keeps more: the backwards ended before it, not the eval batches.
        if (keep) EXPECT_EQ(peak_of(f).microbatch, 23u);
    }
}

// Live, the capture asks at the evaluation's unit ends (its end is unmarked): at its last one, the
// site and rate are the offline analysis', with what the evaluation gathered for the owner search.
TEST(WithinStep, TheLiveMonitorFindsALeakPerEvalBatchAtItsLastBatch) {
    Loop loop;
    loop.eval_batches = 16, loop.eval_keep = MiB;
    loop.run(3, 4);
    const Findings offline = analyze(loop.b.t);
    ASSERT_EQ(offline.within_step.size(), 1u);
    LiveMonitor live;
    SiteResolver sites(loop.b.t.stacks);
    std::vector<LiveLeak> rising;
    uint32_t units = 0;
    for (const Event& e : loop.b.t.events) {
        if (e.kind == EventKind::alloc) live.alloc(e.device, e.addr, e.size, sites.site(e.stack));
        else if (is_release(e.kind)) live.release(e.device, e.addr);
        else if (e.kind == EventKind::microbatch) {
            live.end_unit(e.name);
            if (loop.b.t.stacks.string(e.name) == "eval batch" && ++units % 16 == 0) {
                rising = live.rising_in_step();
                ASSERT_EQ(rising.size(), 1u);
                EXPECT_EQ(source_line(loop.b.t.stacks, rising[0].site).line, 40u);
                EXPECT_DOUBLE_EQ(rising[0].bytes_per_step, offline.within_step[0].bytes_per_unit);
                ASSERT_FALSE(rising[0].newest_blocks.empty());
                EXPECT_EQ(rising[0].newest_blocks[0].second, 16 * MiB);  // all it gathered, in one block
            }
        } else if (e.kind == EventKind::step) live.end_step();
    }
    EXPECT_EQ(units, 32u);
}

TEST(WithinStep, ACleanGradientAccumulationIsNoLeakInsideTheStep) {
    Loop loop;
    loop.run(12, 24);
    const Findings f = analyze(loop.b.t);
    EXPECT_TRUE(f.within_step.empty());
    EXPECT_EQ(f.verdict, Verdict::no_leak);
}

TEST(WithinStep, TooFewMicrobatchesAreNotJudged) {
    Loop loop;
    loop.run(12, kMinSteps - 1, 8 * MiB);
    EXPECT_TRUE(analyze(loop.b.t).within_step.empty());
}

TEST(WithinStep, TheOutOfMemoryUnitCountFollowsFromTheDeviceAndTheRate) {
    Loop loop;
    loop.run(1, 24, 8 * MiB);
    AnalysisOptions opt;
    opt.device_memory = 1024 * MiB;
    const Findings f = analyze(loop.b.t, opt);
    ASSERT_EQ(f.within_step.size(), 1u);
    // The step's peak: parameters, gradients, the kept losses, one microbatch's working set.
    const uint64_t peak = f.devices.front().timeline[0].peak_allocated;
    EXPECT_EQ(f.within_step.front().oom_units, 24 + (1024 * MiB - peak + 8 * MiB - 1) / (8 * MiB));
}

TEST(Peak, FindingsWithAPeakAndALeakInsideAStepReadBackAsWritten) {
    Loop loop;
    loop.run(2, 24, 8 * MiB);
    const std::string json = to_json(analyze(loop.b.t));
    const FindingsFile back = read_findings(json, "peak.json");
    ASSERT_EQ(back.runs.size(), 1u);
    EXPECT_EQ(to_json(back.runs.front()), json);
}

// Random loops with random phase markers: whatever the blocks do, the categories sum to the peak,
// and the peak is the timeline's highest point.
TEST(Peak, CategoriesSumToThePeakOnRandomTraces) {
    std::mt19937_64 rng(20261201);
    const char* marks[] = {"vramscope.backward", "Optimizer.step#SGD.step"};
    for (int trial = 0; trial < 300; ++trial) {
        TraceBuilder b;
        std::vector<uint32_t> sites;
        for (int k = 0; k < 1 + int(rng() % 5); ++k) sites.push_back(b.stack({{"/home/u/train.py", uint32_t(10 + k), "train"}}));
        if (rng() % 3 == 0) b.t.device(0).baseline_allocated = 16 * MiB;
        std::vector<std::pair<uint64_t, uint64_t>> live;
        uint64_t next = 0x1000000000;
        const int steps = 1 + int(rng() % 20);
        for (int s = 0; s < steps; ++s) {
            for (int e = 0; e < int(rng() % 20); ++e) {
                const uint64_t r = rng() % 10;
                if (r < 5 || live.empty()) {
                    const uint64_t size = (1 + rng() % 64) * 4096;
                    b.alloc(next, size, sites[rng() % sites.size()]);
                    live.emplace_back(next, size);
                    next += size + 4096;
                } else if (r < 8) {
                    const size_t k = rng() % live.size();
                    b.free(live[k].first, live[k].second);
                    live.erase(live.begin() + ptrdiff_t(k));
                } else if (r < 9) {
                    b.annotation(EventKind::annotation_start, marks[rng() % 2]);
                } else {
                    b.annotation(EventKind::microbatch, "backward");
                }
            }
            b.step();
        }
        SCOPED_TRACE("trial " + std::to_string(trial));
        expect_peak_holds(analyze(b.t));
    }
}

TEST(Peak, CategoriesSumToThePeakOnEveryRecordedFixture) {
    size_t fixtures = 0;
    for (const auto& file : vramscope::testing::recorded_snapshots()) {
        SCOPED_TRACE(file.filename().string());
        const Findings f = analyze_file(file.string());
        ASSERT_FALSE(f.peaks.empty());
        expect_peak_holds(f);
        ++fixtures;
    }
    EXPECT_GE(fixtures, 5u);
}

// The workspaces a first forward takes and keeps (cuBLAS's) are not parameters: a capture marks
// where the first forward begins.
TEST(Peak, WhatTheFirstForwardKeepsIsNotAParameter) {
    Loop loop;
    loop.mark_first_forward = true;
    loop.run(12, 1);
    const Findings f = analyze(loop.b.t);
    expect_peak_holds(f);
    const DevicePeak& p = peak_of(f);
    EXPECT_EQ(p.category(PeakCategory::parameters), 64 * MiB);
    EXPECT_EQ(p.category(PeakCategory::other), 32 * MiB);
}

// An out-of-memory request against what was free: torch's cache held enough in all, in blocks too
// small for it (fragmentation), or the device was full.
TEST(Peak, AnOutOfMemoryRequestSaysWhetherTheCacheWasFragmented) {
    for (const bool scattered : {true, false}) {
        TraceBuilder b;
        const uint32_t stack = b.stack({{"/home/u/train.py", 5, "train"}});
        b.segment(0x1000000000, 1ull << 30);
        if (scattered)  // 16 blocks of 32 MiB, 32 MiB apart: 512 MiB free, none larger than 32 MiB
            for (uint64_t k = 0; k < 16; ++k) b.alloc(0x1000000000 + k * (64 * MiB), 32 * MiB, stack);
        else
            b.alloc(0x1000000000, 1ull << 30, stack);
        b.oom(16 * MiB, 128 * MiB);
        b.step();
        const Findings f = analyze(b.t);
        ASSERT_TRUE(f.devices[0].oom);
        const OomRequest& r = *f.devices[0].oom;
        SCOPED_TRACE(scattered);
        EXPECT_EQ(r.asked, 128 * MiB);
        EXPECT_EQ(r.device_free, 16 * MiB);
        EXPECT_EQ(r.cached_free, scattered ? 512 * MiB : 0);
        EXPECT_EQ(r.largest_free_block, scattered ? 32 * MiB : 0);
        EXPECT_EQ(r.fragmentation(), scattered);
        EXPECT_EQ(render_summary(f, false, 10).find("fragmentation, enough free in all") != std::string::npos, scattered)
            << render_summary(f, false, 10);
    }
}
