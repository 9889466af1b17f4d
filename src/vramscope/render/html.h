// The report people look at: one self-contained HTML file (no network), the findings embedded as
// column-oriented JSON and drawn by the page itself (render/report.html).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "findings/findings.h"

namespace vramscope {

// Who held each leak is in the findings (SiteFinding::owners), joined before they get here. The
// page is titled by its inputs (page_title).
std::string render_html(const std::vector<Findings>& runs, const RankComparison& ranks);

// The page around report data already made: {"generator", "runs": [findings...], "ranks"}.
std::string report_page(std::string_view data_json, std::string_view title);

}  // namespace vramscope
