// Libraries that count their own pools (EventKind::pool_usage: JAX's memory_stats(), CuPy's default
// pool), judged by their bytes in use instead of by the driver memory their pools took
// (judge.h's judge_pool: the same rule, live and offline). A pool that sub-allocates hides its
// arrays from the driver's calls: it grows in doublings (a leak's rate misread, a full pool read
// as a cache that filled) or was taken whole at the start (a leak not seen at all).
#pragma once
#include <string>
#include <vector>

#include "analysis/judge.h"
#include "analysis/replay.h"

namespace vramscope {

struct CountedPool {
    PoolSeries* series = nullptr;
    HolderSeries* holder = nullptr;  // the library's driver memory on the device, where the capture saw some
    PoolJudgement judged;            // its bytes in use at the judged step ends
    bool driver_rose = false;        // a site of its driver memory would have been judged a leak on its own
};

// Each pool the trace counted, judged over the step ends s0..S-1 (S full steps); the series and the
// holders are written down to the end (HeldSeries::record_held).
std::vector<CountedPool> count_pools(Replay& r, size_t s0, size_t S, size_t min_steps);

// The library whose driver call allocated a site's latest block, as analysis/libraries.h names it.
std::string site_library(const Trace& t, const SiteSeries& s);

// The counted pool that speaks for a site's memory (device memory of its library, on its device,
// where the pool accounts for what the driver showed); null where none does.
CountedPool* pool_of(std::vector<CountedPool>& pools, const Trace& t, const SiteSeries& s);

}  // namespace vramscope
