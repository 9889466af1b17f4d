#include "analysis/peak.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "analysis/sites.h"

namespace vramscope {

PeakCategory peak_category(const PeakMember& m, bool site_leaks, bool backward_known, size_t full_steps) {
    if (site_leaks) return PeakCategory::leaks;
    const bool kept_through_run = !m.freed || m.free_step >= full_steps;
    if (m.alloc_phase == Phase::setup && kept_through_run) return PeakCategory::parameters;
    if (m.in_peak_phase && m.freed && m.freed_in_peak_phase) return PeakCategory::temporaries;
    switch (m.alloc_phase) {
    case Phase::backward: return PeakCategory::gradients;
    case Phase::optimizer: return PeakCategory::optimizer_state;
    case Phase::setup:
    case Phase::forward:
        if (!backward_known) return m.freed && m.free_step == m.alloc_step ? PeakCategory::temporaries : PeakCategory::other;
        return m.freed && m.free_phase == Phase::backward ? PeakCategory::activations : PeakCategory::other;
    }
    return PeakCategory::other;
}

DevicePeak describe_peak(uint16_t device, const PeakMoment& moment, std::span<const PeakMember> live_at_end,
                         std::span<const PeakSiteKey> sites, bool backward_marked, bool backward_inferred, size_t full_steps,
                         const StackTable& table) {
    DevicePeak p;
    p.device = device;
    p.step = moment.step;
    p.phase = moment.phase;
    p.microbatch = moment.microbatch;
    p.reserved = uint64_t(std::max<int64_t>(0, moment.reserved));
    p.external = uint64_t(std::max<int64_t>(0, moment.external));
    p.pinned = uint64_t(std::max<int64_t>(0, moment.pinned));
    p.backward_marked = backward_marked;
    p.backward_inferred = backward_inferred;
    struct SiteBytes {
        uint64_t bytes = 0;
        std::array<uint64_t, kPeakCategories> by_category{};
        std::unordered_map<uint32_t, uint64_t> by_stack;
    };
    std::map<uint32_t, SiteBytes> by_site;  // by index into `sites`
    struct ModuleBytes {
        uint64_t bytes = 0;
        std::array<uint64_t, kPeakCategories> by_category{};
    };
    std::map<std::string, ModuleBytes> by_module;
    // By the module annotation a block was allocated under, else by its stack's class.
    std::unordered_map<uint32_t, ModuleBytes*> module_of_stack, module_of_annotation;
    uint64_t members = 0;
    const auto count = [&](const PeakMember& m) {
        const PeakCategory c = peak_category(m, sites[m.site].leaks, backward_marked || backward_inferred, full_steps);
        p.categories[size_t(c)] += m.size;
        members += m.size;
        SiteBytes& s = by_site[m.site];
        s.bytes += m.size;
        s.by_category[size_t(c)] += m.size;
        s.by_stack[m.stack] += m.size;
        auto [at, fresh] = m.module ? module_of_annotation.try_emplace(m.module, nullptr) : module_of_stack.try_emplace(m.stack, nullptr);
        if (fresh) at->second = &by_module[m.module ? std::string(module_path(table, m.module)) : module_of(table, m.stack)];
        at->second->bytes += m.size;
        at->second->by_category[size_t(c)] += m.size;
    };
    for (const PeakMember& m : moment.freed) count(m);
    for (const PeakMember& m : live_at_end) count(m);
    // What the trace never saw allocated (a baseline, blocks from before its start) is the rest.
    const uint64_t peak = uint64_t(std::max<int64_t>(0, moment.bytes));
    p.categories[size_t(PeakCategory::before_trace)] += peak > members ? peak - members : 0;
    p.bytes = std::max(peak, members);

    std::vector<std::pair<uint64_t, uint32_t>> top;
    for (const auto& [site, s] : by_site) top.emplace_back(s.bytes, site);
    std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
    for (size_t k = 0; k < top.size() && k < kPeakSites; ++k) {
        const SiteBytes& s = by_site[top[k].second];
        PeakSite ps;
        ps.site = source_line(table, sites[top[k].second].frame);
        ps.bytes = s.bytes;
        ps.category = PeakCategory(std::max_element(s.by_category.begin(), s.by_category.end()) - s.by_category.begin());
        uint32_t best = 0;
        uint64_t best_bytes = 0;
        for (const auto& [stack, bytes] : s.by_stack)
            if (bytes > best_bytes || (bytes == best_bytes && stack < best)) best_bytes = bytes, best = stack;
        ps.stack = stack_lines(table, best);
        ps.stack_shown_from = machinery_frames(ps.stack);
        p.sites.push_back(std::move(ps));
    }
    std::vector<std::pair<uint64_t, const std::string*>> top_modules;
    for (const auto& [module, m] : by_module) top_modules.emplace_back(m.bytes, &module);
    std::sort(top_modules.begin(), top_modules.end(),
              [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : *a.second < *b.second; });
    for (size_t k = 0; k < top_modules.size() && k < kPeakSites; ++k) {
        const ModuleBytes& m = by_module[*top_modules[k].second];
        p.modules.push_back(PeakModule{*top_modules[k].second, m.bytes,
                                       PeakCategory(std::max_element(m.by_category.begin(), m.by_category.end()) - m.by_category.begin())});
    }
    p.module = moment.module  ? std::string(module_path(table, moment.module))
               : moment.stack ? module_of(table, moment.stack)
                              : std::string();
    return p;
}

}  // namespace vramscope
