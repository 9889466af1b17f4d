#include "analysis/pools.h"

#include "analysis/libraries.h"

namespace vramscope {

std::vector<CountedPool> count_pools(Replay& r, size_t s0, size_t S, size_t min_steps) {
    std::vector<CountedPool> out;
    if (S == 0) return out;
    for (PoolSeries& p : r.pools) {
        CountedPool c;
        c.series = &p;
        p.in_use.record_held(uint32_t(S));
        p.pool.record_held(uint32_t(S));
        for (HolderSeries& h : r.holders)
            if (h.device == p.device && h.memory == Memory::external && h.library == p.library) c.holder = &h;
        if (c.holder) c.holder->record_held(uint32_t(S));
        const size_t from = std::min(s0, S - 1);
        const double driver_growth = c.holder ? c.holder->at_end(S - 1) - c.holder->at_end(from) : 0;
        c.judged = judge_pool(p.in_use.held.stretches(uint32_t(from), uint32_t(S - 1)), p.pool.at_end(S - 1) - p.pool.at_end(from),
                              driver_growth, min_steps);
        out.push_back(std::move(c));
    }
    return out;
}

std::string site_library(const Trace& t, const SiteSeries& s) {
    return library_name(s.last_stack ? t.stacks.string(t.stacks.frame(t.stacks.node(s.last_stack).frame).file) : kUnknownLibrary);
}

CountedPool* pool_of(std::vector<CountedPool>& pools, const Trace& t, const SiteSeries& s) {
    if (s.memory != Memory::external || pools.empty()) return nullptr;
    const std::string library = site_library(t, s);
    for (CountedPool& c : pools)
        if (c.judged.counts && c.series->device == s.device && c.series->library == library) return &c;
    return nullptr;
}

}  // namespace vramscope
