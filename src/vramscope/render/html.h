// The report people look at: one self-contained HTML file (no network), the findings embedded as
// column-oriented JSON and drawn by the page itself (render/report.html).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "findings/findings.h"

namespace vramscope {

// owners: per run, the text of its TRACE.owners.json (who held each leak), or empty.
std::string render_html(const std::vector<Findings>& runs, const RankComparison& ranks,
                        const std::vector<std::string>& owners);

// The page around report data already made: {"generator", "runs": [findings...], "ranks", "owners"}
// (a findings JSON's runs work too: the page draws their timeline instead of columns).
std::string report_page(std::string_view data_json);

}  // namespace vramscope
