// Where one training step ends and the next begins: every place that decides it, in the order an
// event meets them.
//
// 1. Live, a capture writes step markers (EventKind::step, named by their unit) where its step
//    sources say (python/vramscope/capture/steps.py StepSource): vramscope.step() beats the
//    optimizer, which beats evaluation batches, which beat generate() calls; the strongest source
//    seen owns the steps, and a weaker one's ends are units inside the step instead (microbatch
//    markers, analysis/within_step.h). Of several optimizers, one holds the role (OptimizerRole:
//    the first seen, handed on to one over the same parameters).
// 2. In a trace, StepFinder (below) takes the best source it offers: those markers, else torch's
//    optimizer annotations (the first optimizer's, FirstOptimizer), else optimizer frames in the
//    stacks, else the period of the allocations. It sees the events once, as they stream by.
// 3. The replay cuts steps where they end (analysis/step_cuts.h): GuessedSteps as the events pass
//    (markers, else the first optimizer's annotations), or PlacedSteps where StepFinder placed them
//    when that differs (the file is then read again, analyze.cpp read_file).
// 4. Numbering: step 0 is the first step end a memory event precedes; those before are forgotten (a
//    ring buffer that wrapped keeps markers of steps whose memory it lost), by the replay
//    (Replay::forget_steps_before_memory), the live monitor's sink (LiveSink) and the recorder's
//    NVML reads (capture/recorder.h read_usage_at_step_ends) alike.
// 5. `--steps A:B` and the judge's warm-up then choose which of the numbered steps are judged.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/address_map.h"
#include "events/trace.h"
#include "findings/vocabulary.h"

namespace vramscope {

struct Steps {
    // Index of the last event of each full step; events after the last index form an unfinished
    // step that the timeline shows but survivor analysis does not judge.
    std::vector<size_t> ends;
    StepsSource source = StepsSource::none;
    std::string detail;  // e.g. the annotation name, or the anchor site of the period
    // What one step is, as a report says "per <unit>": the markers' own unit (the one most of them
    // carry, e.g. "optimizer step", "eval batch", "generate() call"; "step" for markers without
    // one), "optimizer step" for the optimizer's annotations or frames, "repeat of <site>" for a
    // period. Empty when there are no steps.
    std::string unit;
    // Inferred period, before its ends are known: a step ends just before each allocation with
    // this key (period_key) after the first. Only what a second look at the events can place.
    std::optional<uint64_t> period_anchor;
};

// What the period counts: an allocation's stack, or its size when it has none.
inline uint64_t period_key(const Event& e) { return e.stack ? uint64_t(e.stack) : (uint64_t(1) << 63) | e.size; }

// The unit of steps that torch.optim ends, whether from markers, annotations or frames.
inline constexpr std::string_view kOptimizerStepUnit = "optimizer step";
// The unit of markers written without one (traces recorded before markers named their unit).
inline constexpr std::string_view kUnnamedStepUnit = "step";

// The annotations a capture opens as the run's first module call begins (the end of setup: the
// workspaces its first forward takes are not parameters) and as torch.autograd.backward is called
// (its end is the microbatch marker); the optimizer's start is torch's own spelling, which a capture
// writes from the pre-step hook (analysis/phases.h).
inline constexpr std::string_view kFirstForwardAnnotation = "vramscope.forward";
inline constexpr std::string_view kBackwardAnnotation = "vramscope.backward";
// Opened and closed around each module call when a capture records module paths (opt-in), followed
// by the module's instance path: "vramscope.module model.layers.3.mlp" (peak.h ModuleStack).
inline constexpr std::string_view kModuleAnnotationPrefix = "vramscope.module ";

// What an annotation's name says: torch wraps optimizer.step() and zero_grad() in
// record_function("Optimizer.step#<Class>.step") and ("Optimizer.zero_grad#<Class>.zero_grad").
class AnnotationKinds {
public:
    enum Kind : int8_t { other, optimizer_step, zero_grad, backward, first_forward, module };
    explicit AnnotationKinds(const StackTable& names) : names_(names) {}
    Kind of(uint32_t name);  // by string id, each looked at once

private:
    const StackTable& names_;
    std::vector<int8_t> kind_;  // -1: not looked at yet
};

// Which optimizer's steps are the steps when several step (a GAN's two, a slower second one): the
// first one seen, on the device it was seen on, by its annotation's name, which an optimizer rebuilt
// every round keeps. StepFinder and GuessedSteps cut a trace's annotations by it; a live capture,
// where each optimizer is an object of its own, follows the same role from object to object
// (capture/steps.py OptimizerRole: one over the same parameters replaces the holder).
class FirstOptimizer {
public:
    bool ends_step(uint32_t name, uint8_t device) {
        if (!chosen_) chosen_ = true, name_ = name, device_ = device;
        return name == name_ && device == device_;
    }

private:
    bool chosen_ = false;
    uint32_t name_ = 0;
    uint8_t device_ = 0;
};

// Collects, in one pass, what each source needs; memory: a few words per step and per stack.
class StepFinder {
public:
    explicit StepFinder(const StackTable& stacks) : stacks_(stacks), annotations_(stacks) {}
    // The next event (its stack already in the table). Inline: most events it only counts.
    void see(const Event& e) {
        if (e.kind == EventKind::step || (e.kind == EventKind::annotation_end && markers_.empty())) see_mark(e);
        else if (e.kind == EventKind::alloc && markers_.empty()) see_alloc(e);
        else ++index_;
    }
    // The best source; an inferred period comes back as period_anchor, without ends.
    Steps finish() const;

private:
    struct OptimizerEnd {
        size_t index;
        uint32_t name;
        uint8_t device;
        size_t next_alloc;  // index of the first allocation after it (SIZE_MAX: none)
    };
    // How one period key recurs: enough to tell an outer unit (a turn) from the repeats inside it.
    struct Recurrence {
        uint32_t count = 0;
        size_t first = 0, last = 0;             // event indices
        size_t min_gap = SIZE_MAX, max_gap = 0;  // between consecutive occurrences, in events
        void see(size_t i) {
            if (count++ == 0) {
                first = i;
            } else {
                min_gap = std::min(min_gap, i - last);
                max_gap = std::max(max_gap, i - last);
            }
            last = i;
        }
    };
    void see_mark(const Event& e);  // a step marker, or an annotation's end before any
    [[gnu::noinline]] void see_alloc(const Event& e);  // before any marker
    bool optimizer_stack(uint32_t stack) {
        if (stack < in_optimizer_.size() && in_optimizer_[stack] >= 0) [[likely]] return in_optimizer_[stack] == 1;
        return look_for_optimizer(stack);
    }
    [[gnu::noinline]] bool look_for_optimizer(uint32_t stack);
    bool from_optimizer_annotations(Steps& out) const;
    bool from_period(Steps& out) const;
    std::string marker_unit() const;
    std::string period_unit(uint64_t key) const;

    const StackTable& stacks_;
    size_t index_ = 0;
    std::vector<size_t> markers_;
    std::vector<std::pair<uint32_t, size_t>> marker_names_;  // (name, markers) in order of first use: a few
    AnnotationKinds annotations_;
    std::vector<OptimizerEnd> optimizer_ends_;
    size_t waiting_for_alloc_ = 0;       // optimizer_ends_ from here on have no next_alloc yet
    std::vector<size_t> zero_grad_ends_;
    std::vector<int8_t> in_optimizer_;  // by stack id: -1 unknown, 0 no, 1 under torch/optim/
    bool in_optimizer_run_ = false;
    std::vector<size_t> optimizer_frame_ends_;
    // How each period key recurs: an allocation's stack (the usual key, by id), or its size where
    // it has none (in an AddressMap: unordered_map's lookup divided, per allocation). Together a
    // tenth of a streamed analysis when they were one unordered_map.
    std::vector<Recurrence> period_of_stack_;
    std::vector<std::pair<uint64_t, Recurrence>> period_of_size_;  // (key, how), in order of first use
    AddressMap size_periods_;                                       // key -> index into period_of_size_
    Recurrence& recurrence(const Event& e) {
        if (!e.stack) {
            const uint64_t key = period_key(e);
            const uint32_t i = size_periods_.get(key);
            if (i != AddressMap::kMissing) return period_of_size_[i].second;
            size_periods_.put(key, uint32_t(period_of_size_.size()));
            return period_of_size_.emplace_back(key, Recurrence{}).second;
        }
        if (e.stack >= period_of_stack_.size()) period_of_stack_.resize(std::max<size_t>(e.stack + 1, period_of_stack_.size() * 2));
        return period_of_stack_[e.stack];
    }
    // Each key that recurred, with how: fn(key, recurrence), in no particular order.
    template <class Fn> void each_period(Fn fn) const {
        for (size_t stack = 0; stack < period_of_stack_.size(); ++stack)
            if (period_of_stack_[stack].count) fn(uint64_t(stack), period_of_stack_[stack]);
        for (const auto& [key, r] : period_of_size_) fn(key, r);
    }
};

// The steps of a trace in memory, ends placed for every source.
Steps find_steps(const Trace& trace);

}  // namespace vramscope
