#include "analysis/steps.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace vramscope {
namespace {

// One pass collects what the first two sources need: step markers and optimizer annotation ends.
struct Marks {
    std::vector<size_t> steps;
    std::vector<size_t> optimizer_ends;
    std::vector<size_t> zero_grad_ends;
};

Marks scan(const Trace& t) {
    Marks m;
    std::vector<int8_t> kind_of_name;  // by string id: -1 unknown, 0 other, 1 optimizer step, 2 zero_grad
    for (size_t i = 0; i < t.events.size(); ++i) {
        const Event& e = t.events[i];
        if (e.kind == EventKind::step) {
            m.steps.push_back(i);
        } else if (e.kind == EventKind::annotation_end) {
            if (e.name >= kind_of_name.size()) kind_of_name.resize(e.name + 1, -1);
            int8_t& kind = kind_of_name[e.name];
            if (kind < 0) {
                const std::string_view name = t.stacks.string(e.name);
                kind = name.starts_with("Optimizer.step#") ? 1 : name.starts_with("Optimizer.zero_grad#") ? 2 : 0;
            }
            if (kind == 1) m.optimizer_ends.push_back(i);
            if (kind == 2) m.zero_grad_ends.push_back(i);
        }
    }
    return m;
}

bool from_markers(const Marks& m, Steps& out) {
    if (m.steps.empty()) return false;
    out.ends = m.steps;
    out.source = StepsSource::markers;
    out.detail = "vramscope step markers";
    return true;
}

// torch wraps every optimizer.step() in record_function("Optimizer.step#<Class>.step"), which the
// memory recorder keeps as START/END annotations. With several optimizers, the most frequent one
// (first seen on a tie) stands for the step, on the device that recorded it first.
bool from_optimizer_annotations(const Trace& t, const Marks& m, Steps& out) {
    if (m.optimizer_ends.empty()) return false;
    std::map<uint32_t, size_t> counts;
    std::vector<uint32_t> order;
    for (size_t i : m.optimizer_ends)
        if (counts[t.events[i].name]++ == 0) order.push_back(t.events[i].name);
    uint32_t best = order.front();
    for (uint32_t n : order)
        if (counts[n] > counts[best]) best = n;
    const uint16_t device = t.events[m.optimizer_ends.front()].device;
    for (size_t i : m.optimizer_ends)
        if (t.events[i].name == best && t.events[i].device == device) out.ends.push_back(i);
    out.source = StepsSource::optimizer_annotations;
    out.detail = std::string(t.stacks.string(best));
    // A zero_grad() right after the step (no allocation between) belongs to it: the step then
    // ends where users read memory_allocated(), with the gradients released.
    size_t z = 0, extended = 0;
    for (size_t k = 0; k < out.ends.size(); ++k) {
        const size_t next = k + 1 < out.ends.size() ? out.ends[k + 1] : t.events.size();
        while (z < m.zero_grad_ends.size() && m.zero_grad_ends[z] < out.ends[k]) ++z;
        if (z == m.zero_grad_ends.size() || m.zero_grad_ends[z] >= next) continue;
        bool allocates = false;
        for (size_t i = out.ends[k] + 1; i < m.zero_grad_ends[z] && !allocates; ++i)
            allocates = t.events[i].kind == EventKind::alloc;
        if (!allocates) out.ends[k] = m.zero_grad_ends[z], ++extended;
    }
    if (extended) out.detail += " + zero_grad";
    return true;
}

// Without annotations, torch's optimizers still show in the stacks (stacks="python"): each run
// of allocations made under torch/optim/ is one optimizer.step(), and the step ends where the
// next allocation from elsewhere begins.
bool from_optimizer_frames(const Trace& t, Steps& out) {
    std::vector<int8_t> in_optimizer(t.stacks.stack_count() + 1, -1);  // by stack id
    auto optimizer_stack = [&](uint32_t stack) {
        int8_t& known = in_optimizer[stack];
        if (known < 0) {
            known = 0;
            for (uint32_t f : t.stacks.frames_of(stack))
                if (t.stacks.string(t.stacks.frame(f).file).find("/torch/optim/") != std::string_view::npos) known = 1;
        }
        return known == 1;
    };
    bool in_step = false;
    for (size_t i = 0; i < t.events.size(); ++i) {
        const Event& e = t.events[i];
        if (e.kind != EventKind::alloc || e.stack == 0) continue;
        const bool optimizer = optimizer_stack(e.stack);
        if (in_step && !optimizer) out.ends.push_back(i - 1);
        in_step = optimizer;
    }
    if (out.ends.size() < 2) return false;
    out.source = StepsSource::optimizer_frames;
    out.detail = "allocations under torch/optim/";
    return true;
}

// A training loop repeats: many allocation sites occur exactly once per step (or per
// microbatch, or per layer). The occurrence count whose sites cover the most allocations is the
// loop's period; a smaller count that divides it and still covers a quarter as much is a coarser
// repeat (steps of several microbatches) and wins. The earliest site with that count marks steps.
bool from_period(const Trace& t, Steps& out) {
    std::unordered_map<uint64_t, uint32_t> count;
    std::unordered_map<uint64_t, size_t> first_seen;
    auto key_of = [](const Event& e) { return e.stack ? uint64_t(e.stack) : (uint64_t(1) << 63) | e.size; };
    for (size_t i = 0; i < t.events.size(); ++i) {
        const Event& e = t.events[i];
        if (e.kind != EventKind::alloc) continue;
        if (count[key_of(e)]++ == 0) first_seen[key_of(e)] = i;
    }
    std::map<uint32_t, uint32_t> sites_with_count;
    for (const auto& [key, c] : count)
        if (c >= 3) ++sites_with_count[c];
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
    uint64_t anchor = 0;
    size_t anchor_first = SIZE_MAX;
    for (const auto& [key, c] : count)
        if (c == period && first_seen[key] < anchor_first) {
            anchor_first = first_seen[key];
            anchor = key;
        }
    bool first = true;
    for (size_t i = 0; i < t.events.size(); ++i) {
        const Event& e = t.events[i];
        if (e.kind != EventKind::alloc || key_of(e) != anchor) continue;
        if (!first && i > 0) out.ends.push_back(i - 1);  // a step ends just before its successor starts
        first = false;
    }
    out.source = StepsSource::inferred_period;
    out.detail = std::to_string(sites_with_count.at(period)) + " allocation sites recur " + std::to_string(period) + " times";
    return !out.ends.empty();
}

}  // namespace

Steps find_steps(const Trace& trace) {
    const Marks marks = scan(trace);
    Steps s;
    if (from_markers(marks, s)) return s;
    s = Steps{};
    if (from_optimizer_annotations(trace, marks, s)) return s;
    s = Steps{};
    if (from_optimizer_frames(trace, s)) return s;
    s = Steps{};
    if (from_period(trace, s)) return s;
    s = Steps{};
    return s;
}

}  // namespace vramscope
