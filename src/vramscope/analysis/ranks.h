// The ranks of one distributed run side by side: a leak or a memory level that only some ranks
// show (uneven sharding, a rank-0-only logger or eval) is the first thing to know about it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "findings/findings.h"

namespace vramscope {

// Runs that carry a "rank" in their metadata (vramscope capture writes it); empty rows when
// fewer than two do.
RankComparison compare_ranks(const std::vector<Findings>& runs);

}  // namespace vramscope
