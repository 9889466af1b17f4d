#include "analysis/steps.h"

#include <algorithm>

namespace vramscope {

AnnotationKinds::Kind AnnotationKinds::of(uint32_t name) {
    if (name >= kind_.size()) kind_.resize(name + 1, -1);
    int8_t& kind = kind_[name];
    if (kind < 0) {
        const std::string_view text = names_.string(name);
        kind = text.starts_with("Optimizer.step#") ? optimizer_step : text.starts_with("Optimizer.zero_grad#") ? zero_grad : other;
    }
    return Kind(kind);
}

void StepFinder::see_any(const Event& e) {
    const size_t i = index_++;
    if (e.kind == EventKind::step) {
        markers_.push_back(i);
    } else if (!markers_.empty()) {
        return;  // markers win: nothing else is needed any more
    } else if (e.kind == EventKind::annotation_end) {
        const AnnotationKinds::Kind kind = annotations_.of(e.name);
        if (kind == AnnotationKinds::optimizer_step) optimizer_ends_.push_back({i, e.name, e.device, SIZE_MAX});
        if (kind == AnnotationKinds::zero_grad) zero_grad_ends_.push_back(i);
    } else if (e.kind == EventKind::alloc) {
        for (; waiting_for_alloc_ < optimizer_ends_.size(); ++waiting_for_alloc_) optimizer_ends_[waiting_for_alloc_].next_alloc = i;
        auto [it, first] = period_.try_emplace(period_key(e), 0, i);
        ++it->second.first;
        // Each run of allocations made under torch/optim/ is one optimizer.step(); the step ends
        // where the next allocation from elsewhere begins.
        if (e.stack) {
            const bool optimizer = optimizer_stack(e.stack);
            if (in_optimizer_run_ && !optimizer) optimizer_frame_ends_.push_back(i - 1);
            in_optimizer_run_ = optimizer;
        }
    }
}

bool StepFinder::optimizer_stack(uint32_t stack) {
    if (stack >= in_optimizer_.size()) in_optimizer_.resize(std::max<size_t>(stack + 1, in_optimizer_.size() * 2), -1);
    int8_t& known = in_optimizer_[stack];
    if (known < 0) {
        known = 0;
        for (uint32_t f : stacks_.frames_of(stack))
            if (stacks_.string(stacks_.frame(f).file).find("/torch/optim/") != std::string_view::npos) known = 1;
    }
    return known == 1;
}

// The memory recorder keeps the optimizer's record_function regions as START/END annotations
// (AnnotationKinds). With several optimizers, the most frequent one
// (first seen on a tie) stands for the step, on the device that recorded it first.
bool StepFinder::from_optimizer_annotations(Steps& out) const {
    if (optimizer_ends_.empty()) return false;
    std::map<uint32_t, size_t> counts;
    std::vector<uint32_t> order;
    for (const OptimizerEnd& o : optimizer_ends_)
        if (counts[o.name]++ == 0) order.push_back(o.name);
    uint32_t best = order.front();
    for (uint32_t n : order)
        if (counts[n] > counts[best]) best = n;
    const uint8_t device = optimizer_ends_.front().device;
    std::vector<const OptimizerEnd*> chosen;
    for (const OptimizerEnd& o : optimizer_ends_)
        if (o.name == best && o.device == device) chosen.push_back(&o);
    out.source = StepsSource::optimizer_annotations;
    out.detail = std::string(stacks_.string(best));
    // A zero_grad() right after the step (no allocation between) belongs to it: the step then
    // ends where users read memory_allocated(), with the gradients released.
    size_t z = 0, extended = 0;
    for (size_t k = 0; k < chosen.size(); ++k) {
        const size_t end = chosen[k]->index, next = k + 1 < chosen.size() ? chosen[k + 1]->index : index_;
        while (z < zero_grad_ends_.size() && zero_grad_ends_[z] < end) ++z;
        const bool extends = z < zero_grad_ends_.size() && zero_grad_ends_[z] < next && chosen[k]->next_alloc >= zero_grad_ends_[z];
        out.ends.push_back(extends ? zero_grad_ends_[z] : end);
        extended += extends;
    }
    if (extended) out.detail += " + zero_grad";
    return true;
}

// A training loop repeats: many allocation sites occur exactly once per step (or per
// microbatch, or per layer). The occurrence count whose sites cover the most allocations is the
// loop's period; a smaller count that divides it and still covers a quarter as much is a coarser
// repeat (steps of several microbatches) and wins. The earliest site with that count marks steps.
bool StepFinder::from_period(Steps& out) const {
    std::map<uint32_t, uint32_t> sites_with_count;
    for (const auto& [key, seen] : period_)
        if (seen.first >= 3) ++sites_with_count[seen.first];
    if (sites_with_count.empty()) return false;
    auto coverage = [&](uint32_t c) { return uint64_t(c) * sites_with_count.at(c); };
    uint32_t period = sites_with_count.begin()->first;
    for (const auto& [c, sites] : sites_with_count)
        if (coverage(c) > coverage(period)) period = c;
    for (const auto& [c, sites] : sites_with_count) {
        if (c >= period) break;
        if (period % c == 0 && coverage(c) * 4 >= coverage(period)) {
            period = c;
            break;
        }
    }
    size_t anchor_first = SIZE_MAX;
    for (const auto& [key, seen] : period_)
        if (seen.first == period && seen.second < anchor_first) anchor_first = seen.second, out.period_anchor = key;
    out.source = StepsSource::inferred_period;
    out.detail = std::to_string(sites_with_count.at(period)) + " allocation sites recur " + std::to_string(period) + " times";
    return true;
}

Steps StepFinder::finish() const {
    Steps s;
    if (!markers_.empty()) {
        s.ends = markers_;
        s.source = StepsSource::markers;
        s.detail = "vramscope step markers";
        return s;
    }
    if (from_optimizer_annotations(s)) return s;
    s = Steps{};
    if (optimizer_frame_ends_.size() >= 2) {
        s.ends = optimizer_frame_ends_;
        s.source = StepsSource::optimizer_frames;
        s.detail = "allocations under torch/optim/";
        return s;
    }
    if (from_period(s)) return s;
    return Steps{};
}

Steps find_steps(const Trace& trace) {
    StepFinder finder(trace.stacks);
    for (const Event& e : trace.events) finder.see(e);
    Steps s = finder.finish();
    if (!s.period_anchor) return s;
    bool first = true;
    for (size_t i = 0; i < trace.events.size(); ++i) {
        const Event& e = trace.events[i];
        if (e.kind != EventKind::alloc || period_key(e) != *s.period_anchor) continue;
        if (!first) s.ends.push_back(i - 1);  // a step ends just before its successor starts
        first = false;
    }
    s.period_anchor.reset();
    if (s.ends.empty()) return Steps{};
    return s;
}

}  // namespace vramscope
