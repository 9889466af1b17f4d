// The summary a person reads in the terminal: verdict first, then where, then what is not a leak.
#pragma once
#include <string>

#include "findings/findings.h"

namespace vramscope {

std::string render_summary(const Findings& f, bool color, size_t max_leaks = 5);

}  // namespace vramscope
