#include "analysis/steps.h"

#include <algorithm>

#include "analysis/judge.h"
#include "analysis/sites.h"
#include "common/format.h"

namespace vramscope {

AnnotationKinds::Kind AnnotationKinds::of(uint32_t name) {
    if (name >= kind_.size()) kind_.resize(name + 1, -1);
    int8_t& kind = kind_[name];
    if (kind < 0) {
        const std::string_view text = names_.string(name);
        kind = text.starts_with("Optimizer.step#")       ? optimizer_step
               : text.starts_with("Optimizer.zero_grad#") ? zero_grad
               : text == kBackwardAnnotation              ? backward
               : text == kFirstForwardAnnotation          ? first_forward
               : text.starts_with(kModuleAnnotationPrefix)  ? module
                                                          : other;
    }
    return Kind(kind);
}

void StepFinder::see_mark(const Event& e) {
    const size_t i = index_++;
    if (e.kind == EventKind::step) {
        markers_.push_back(i);
        auto named = std::find_if(marker_names_.begin(), marker_names_.end(), [&](const auto& n) { return n.first == e.name; });
        if (named == marker_names_.end()) marker_names_.emplace_back(e.name, 1);
        else ++named->second;
    } else {  // an annotation's end, before any marker (markers win: nothing else is needed then)
        const AnnotationKinds::Kind kind = annotations_.of(e.name);
        if (kind == AnnotationKinds::optimizer_step) optimizer_ends_.push_back({i, e.name, e.device, SIZE_MAX});
        if (kind == AnnotationKinds::zero_grad) zero_grad_ends_.push_back(i);
    }
}

void StepFinder::see_alloc(const Event& e) {
    const size_t i = index_++;
    for (; waiting_for_alloc_ < optimizer_ends_.size(); ++waiting_for_alloc_) optimizer_ends_[waiting_for_alloc_].next_alloc = i;
    recurrence(e).see(i);
    // Each run of allocations made under torch/optim/ is one optimizer.step(); the step ends
    // where the next allocation from elsewhere begins.
    if (e.stack) {
        const bool optimizer = optimizer_stack(e.stack);
        if (in_optimizer_run_ && !optimizer) optimizer_frame_ends_.push_back(i - 1);
        in_optimizer_run_ = optimizer;
    }
}

bool StepFinder::look_for_optimizer(uint32_t stack) {
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
// (AnnotationKinds); with several optimizers, the first one's steps are the steps (FirstOptimizer).
bool StepFinder::from_optimizer_annotations(Steps& out) const {
    if (optimizer_ends_.empty()) return false;
    FirstOptimizer first;
    std::vector<const OptimizerEnd*> chosen;
    for (const OptimizerEnd& o : optimizer_ends_)
        if (first.ends_step(o.name, o.device)) chosen.push_back(&o);
    const uint32_t best = chosen.front()->name;
    out.source = StepsSource::optimizer_annotations;
    out.detail = std::string(stacks_.string(best));
    out.unit = kOptimizerStepUnit;
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

// An outer unit only where it leaves enough whole steps to judge after warm-up (its first
// occurrence opens step 0; each later one ends a step).
constexpr uint32_t kMinOuterUnits = kWarmupSteps + kMinSteps + 1;

// A loop repeats: many allocation sites occur exactly once per step (or per microbatch, per
// layer, per decoded token). The occurrence count whose sites cover the most allocations is the
// loop's period; a smaller count that divides it and still covers a quarter as much is a coarser
// repeat (steps of several microbatches) and wins. Then the outermost unit, where users count: an
// inference loop that decodes a varying number of tokens per chat turn repeats its token sites
// thousands of times, and its turn sites once a turn. A site marks an outer unit when it recurs
// throughout the inner repeats (no stretch of them before its first occurrence or after its last
// is longer than its longest gap) yet never twice within the inner anchor's longest gap, so that
// each of its units holds a whole inner repeat. Among the counts that leave enough units to judge,
// the one whose outer sites cover the most allocations is the unit (a turn's several sites
// outweigh a lone one that fires every few turns); the earliest of its outer sites marks steps.
// Without one, the earliest site with the period's count does.
bool StepFinder::from_period(Steps& out) const {
    struct Anchor {
        uint64_t key = 0;
        const Recurrence* recurs = nullptr;
        size_t sites = 0;
        void see(uint64_t k, const Recurrence& r) {
            ++sites;
            if (!recurs || r.first < recurs->first) key = k, recurs = &r;
        }
    };
    std::map<uint32_t, Anchor> by_count;
    each_period([&](uint64_t key, const Recurrence& recurs) {
        if (recurs.count >= 3) by_count[recurs.count].see(key, recurs);
    });
    if (by_count.empty()) return false;
    auto coverage = [&](uint32_t c) { return uint64_t(c) * by_count.at(c).sites; };
    uint32_t period = by_count.begin()->first;
    for (const auto& [c, a] : by_count)
        if (coverage(c) > coverage(period)) period = c;
    for (const auto& [c, a] : by_count) {
        if (c >= period) break;
        if (period % c == 0 && coverage(c) * 4 >= coverage(period)) {
            period = c;
            break;
        }
    }
    const Recurrence& inner = *by_count.at(period).recurs;
    std::map<uint32_t, Anchor> outer_by_count;
    each_period([&](uint64_t key, const Recurrence& r) {
        if (r.count >= kMinOuterUnits && r.count < period && r.min_gap >= inner.max_gap &&
            r.first <= inner.first + r.max_gap && inner.last <= r.last + r.max_gap)
            outer_by_count[r.count].see(key, r);
    });
    Anchor chosen = by_count.at(period);
    uint64_t outer_coverage = 0;
    for (const auto& [c, a] : outer_by_count)
        if (uint64_t(c) * a.sites > outer_coverage) chosen = a, period = c, outer_coverage = uint64_t(c) * a.sites;
    out.period_anchor = chosen.key;
    out.source = StepsSource::inferred_period;
    out.detail = std::to_string(chosen.sites) + " allocation sites recur " + std::to_string(period) + " times";
    out.unit = period_unit(chosen.key);
    return true;
}

// The unit most markers name; markers without a name (older traces) are plain steps.
std::string StepFinder::marker_unit() const {
    const auto most = std::max_element(marker_names_.begin(), marker_names_.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    return most->first ? std::string(stacks_.string(most->first)) : std::string(kUnnamedStepUnit);
}

// A period's unit, named by its anchor: the site (file:line function) of its stack, else its size.
std::string StepFinder::period_unit(uint64_t key) const {
    if (key >> 63) return "repeat of a " + format_bytes(double(key & ~(uint64_t(1) << 63))) + " allocation";
    SiteResolver sites(stacks_);
    const uint32_t site = sites.site(uint32_t(key));
    if (!site) return "repeat of an allocation site";
    const Frame& f = stacks_.frame(site);
    const std::string_view file = stacks_.string(f.file);
    return "repeat of " + std::string(file.substr(file.find_last_of('/') + 1)) + ":" + std::to_string(f.line) + " " +
           std::string(stacks_.string(f.function));
}

Steps StepFinder::finish() const {
    Steps s;
    if (!markers_.empty()) {
        s.ends = markers_;
        s.source = StepsSource::markers;
        s.detail = "vramscope step markers";
        s.unit = marker_unit();
        return s;
    }
    if (from_optimizer_annotations(s)) return s;
    s = Steps{};
    if (optimizer_frame_ends_.size() >= 2) {
        s.ends = optimizer_frame_ends_;
        s.source = StepsSource::optimizer_frames;
        s.detail = "allocations under torch/optim/";
        s.unit = kOptimizerStepUnit;
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
