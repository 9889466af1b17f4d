#include "render/html.h"

#include <string_view>

#include "findings/json.h"
#include "render/report_template.h"

namespace vramscope {
namespace {

// Inside <script>, "</" would end the element: JSON may spell it "<\/".
std::string script_safe(std::string_view json) {
    std::string out;
    out.reserve(json.size());
    for (size_t i = 0; i < json.size(); ++i) {
        if (json[i] == '<' && i + 1 < json.size() && json[i + 1] == '/') out += "<\\";
        else out.push_back(json[i]);
    }
    return out;
}

}  // namespace

std::string render_html(const std::vector<Findings>& runs, const RankComparison& ranks,
                        const std::vector<std::string>& owners) {
    std::string data = to_report_json(runs, ranks);
    data.pop_back();  // the closing brace: owners go in before it
    data += ",\"owners\":[";
    for (size_t i = 0; i < runs.size(); ++i) {
        if (i) data += ',';
        data += i < owners.size() && !owners[i].empty() ? owners[i] : "null";
    }
    data += "]}";
    return report_page(data);
}

std::string report_page(std::string_view data) {
    const std::string_view page = kReportTemplate;
    constexpr std::string_view kSlot = "/*VRAMSCOPE_DATA*/";
    const size_t at = page.find(kSlot);
    std::string out;
    out.reserve(page.size() + data.size());
    out.append(page.substr(0, at));
    out += script_safe(data);
    out.append(page.substr(at + kSlot.size()));
    return out;
}

}  // namespace vramscope
