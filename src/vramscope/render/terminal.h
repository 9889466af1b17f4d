// The summary a person reads in the terminal: verdict first, then where, then what is not a leak.
#pragma once
#include <string>

#include "findings/findings.h"

namespace vramscope {

std::string render_summary(const Findings& f, bool color, size_t max_leaks = 5);

// "leak: +36.0 MiB/step at modeling_llama.py:480 forward; OOM projected at step 1,912"
std::string one_line_verdict(const Findings& f);

}  // namespace vramscope
