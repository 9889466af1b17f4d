// Where one training step ends and the next begins, from the best source a trace offers:
// our own step markers, else torch's optimizer annotations, else optimizer frames in the stacks,
// else the period of the allocations. StepFinder sees the events once, as they stream by.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "events/trace.h"
#include "findings/vocabulary.h"

namespace vramscope {

struct Steps {
    // Index of the last event of each full step; events after the last index form an unfinished
    // step that the timeline shows but survivor analysis does not judge.
    std::vector<size_t> ends;
    StepsSource source = StepsSource::none;
    std::string detail;  // e.g. the annotation name, or the anchor site of the period
    // Inferred period, before its ends are known: a step ends just before each allocation with
    // this key (period_key) after the first. Only what a second look at the events can place.
    std::optional<uint64_t> period_anchor;
};

// What the period counts: an allocation's stack, or its size when it has none.
inline uint64_t period_key(const Event& e) { return e.stack ? uint64_t(e.stack) : (uint64_t(1) << 63) | e.size; }

// What an annotation's name says: torch wraps optimizer.step() and zero_grad() in
// record_function("Optimizer.step#<Class>.step") and ("Optimizer.zero_grad#<Class>.zero_grad").
class AnnotationKinds {
public:
    enum Kind : int8_t { other, optimizer_step, zero_grad };
    explicit AnnotationKinds(const StackTable& names) : names_(names) {}
    Kind of(uint32_t name);  // by string id, each looked at once

private:
    const StackTable& names_;
    std::vector<int8_t> kind_;  // -1: not looked at yet
};

// Collects, in one pass, what each source needs; memory: a few words per step and per stack.
class StepFinder {
public:
    explicit StepFinder(const StackTable& stacks) : stacks_(stacks), annotations_(stacks) {}
    // The next event (its stack already in the table). Inline: once markers are seen, it only counts.
    void see(const Event& e) {
        if (!markers_.empty() && e.kind != EventKind::step) ++index_;
        else see_any(e);
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
    void see_any(const Event& e);
    bool optimizer_stack(uint32_t stack);
    bool from_optimizer_annotations(Steps& out) const;
    bool from_period(Steps& out) const;

    const StackTable& stacks_;
    size_t index_ = 0;
    std::vector<size_t> markers_;
    AnnotationKinds annotations_;
    std::vector<OptimizerEnd> optimizer_ends_;
    size_t waiting_for_alloc_ = 0;       // optimizer_ends_ from here on have no next_alloc yet
    std::vector<size_t> zero_grad_ends_;
    std::vector<int8_t> in_optimizer_;  // by stack id: -1 unknown, 0 no, 1 under torch/optim/
    bool in_optimizer_run_ = false;
    std::vector<size_t> optimizer_frame_ends_;
    std::unordered_map<uint64_t, std::pair<uint32_t, size_t>> period_;  // key -> (count, first index)
};

// The steps of a trace in memory, ends placed for every source.
Steps find_steps(const Trace& trace);

}  // namespace vramscope
