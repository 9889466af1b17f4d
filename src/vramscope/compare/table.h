// The compare table: per mode, each row's numbers and status against the baseline, then the
// root-cause chain of the leaks (site, stream, owner, which rows remove it). Terminal (100
// columns), Markdown (for a pull request), JSON and a self-contained HTML page.
#pragma once
#include <string>

#include "compare/cells.h"

namespace vramscope {

std::string render_compare_terminal(const CompareRun& run);
std::string render_compare_markdown(const CompareRun& run);
std::string render_compare_json(const CompareRun& run);
std::string render_compare_html(const CompareRun& run);

}  // namespace vramscope
