// The summary a person reads in the terminal: verdict first, then where, then what is not a leak.
#pragma once
#include <string>

#include "findings/findings.h"
#include "findings/shown.h"

namespace vramscope {

// The entries shown: findings/shown.h (kSummaryShown), max_leaks aside.
std::string render_summary(const Findings& f, bool color, size_t max_leaks = kSummaryShown.leaks);
// The ranks side by side, and what differs between them.
std::string render_ranks(const RankComparison& ranks, bool color);
// One line while the run goes on: a leak the live monitor confirmed, or one it withdrew.
std::string render_live(const LiveFinding& live);
// A leak inside the step the live monitor found rising across its units (`unit`: what they are),
// as the capture says it once per site.
std::string render_live_within_step(const LiveFinding& live, std::string_view unit);

}  // namespace vramscope
