// The summary a person reads in the terminal: verdict first, then where, then what is not a leak.
#pragma once
#include <string>

#include "findings/findings.h"

namespace vramscope {

std::string render_summary(const Findings& f, bool color, size_t max_leaks = 5);
// The ranks side by side, and what differs between them.
std::string render_ranks(const RankComparison& ranks, bool color);

}  // namespace vramscope
