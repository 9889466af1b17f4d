#include "render/html.h"

#include <string_view>

#include "common/format.h"
#include "findings/json.h"
#include "render/report_template.h"

namespace vramscope {
namespace {

// No string may change the page: inside <script>, "</script" ends the element and "<!--" followed
// by "<script" keeps it from ending at all (the page renders blank). JSON has these characters only
// inside strings, where \u escapes mean the same: so every <, > and & is escaped, and U+2028/2029
// too (line terminators to older JavaScript). `json` must be valid JSON.
std::string script_safe(std::string_view json) {
    std::string out;
    out.reserve(json.size() + json.size() / 16);
    for (size_t i = 0; i < json.size(); ++i) {
        const char c = json[i];
        if (c == '<') out += "\\u003c";
        else if (c == '>') out += "\\u003e";
        else if (c == '&') out += "\\u0026";
        else if (c == '\xE2' && i + 2 < json.size() && json[i + 1] == '\x80' && (json[i + 2] == '\xA8' || json[i + 2] == '\xA9'))
            out += json[i + 2] == '\xA8' ? "\\u2028" : "\\u2029", i += 2;
        else out.push_back(c);
    }
    return out;
}

}  // namespace

std::string render_html(const std::vector<Findings>& runs, const RankComparison& ranks) {
    std::vector<std::string> sources;
    for (const Findings& f : runs) sources.push_back(f.source);
    return report_page(to_report_json(runs, ranks), page_title("vramscope", sources));
}

std::string report_page(std::string_view data, std::string_view title) {
    const std::string_view page = kReportTemplate;
    constexpr std::string_view kTitleSlot = "/*VRAMSCOPE_TITLE*/", kSlot = "/*VRAMSCOPE_DATA*/";
    const size_t title_at = page.find(kTitleSlot), at = page.find(kSlot);
    std::string out;
    out.reserve(page.size() + data.size());
    out.append(page.substr(0, title_at));
    out += html_escape(title);
    out.append(page.substr(title_at + kTitleSlot.size(), at - title_at - kTitleSlot.size()));
    out += script_safe(data);
    out.append(page.substr(at + kSlot.size()));
    return out;
}

}  // namespace vramscope
