#include "compare/diff.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "common/format.h"
#include "compare/status.h"
#include "findings/json_writer.h"

namespace vramscope {
namespace {

std::string site_words(const SourceLine& s) {
    return s.line ? base_name(s.file) + ":" + std::to_string(s.line) + " " + s.function : s.file;
}
using SiteKey = std::tuple<std::string, uint32_t, std::string>;
SiteKey key_of(const SourceLine& s) { return {s.file, s.line, s.function}; }

const DevicePeak* peak_on(const Findings& f, uint16_t device) {
    for (const DevicePeak& p : f.peaks)
        if (p.device == device) return &p;
    return nullptr;
}

PeakDiff peak_diff(uint16_t device, std::string device_name, const DevicePeak* a, const DevicePeak* b) {
    PeakDiff d;
    d.device = device;
    d.device_name = std::move(device_name);
    std::map<SiteKey, PeakDiff::Site> sites;
    std::map<std::string, PeakDiff::Module> modules;
    for (const auto& [peak, side] : {std::pair{a, 0}, std::pair{b, 1}}) {
        if (!peak) continue;
        (side ? d.b : d.a) = peak->bytes;
        (side ? d.b_categories : d.a_categories) = peak->categories;
        for (const PeakSite& s : peak->sites) {
            PeakDiff::Site& at = sites[key_of(s.site)];
            at.site = s.site;
            (side ? at.b : at.a) = s.bytes;
        }
        for (const PeakModule& m : peak->modules) {
            PeakDiff::Module& at = modules[m.module];
            at.module = m.module;
            (side ? at.b : at.a) = m.bytes;
        }
    }
    const auto larger_first = [](const auto& x, const auto& y) { return std::max(x.a, x.b) > std::max(y.a, y.b); };
    for (auto& [k, s] : sites) d.sites.push_back(std::move(s));
    std::stable_sort(d.sites.begin(), d.sites.end(), larger_first);
    for (auto& [k, m] : modules) d.modules.push_back(std::move(m));
    std::stable_sort(d.modules.begin(), d.modules.end(), larger_first);
    return d;
}

LeakChange change_of(double a, double b) {
    if (a > 0 && b <= 0) return LeakChange::gone;
    if (a <= 0 && b > 0) return LeakChange::added;
    return std::fabs(b - a) >= kRateMoves * std::max(a, b) ? LeakChange::changed : LeakChange::same;
}

void add_leaks(const Findings& a, const Findings& b, std::vector<LeakDiff>& out) {
    std::map<std::tuple<bool, uint16_t, uint8_t, SiteKey>, LeakDiff> by_site;
    const auto add = [&](const SourceLine& site, uint16_t device, Memory memory, bool within, const std::string& unit,
                         double rate, bool in_b) {
        LeakDiff& d = by_site[{within, device, uint8_t(memory), key_of(site)}];
        d.site = site, d.device = device, d.memory = memory, d.within_step = within, d.unit = unit;
        (in_b ? d.b : d.a) += rate;
    };
    for (const auto& [f, in_b] : {std::pair{&a, false}, std::pair{&b, true}}) {
        const std::string unit = f->step_unit.empty() ? "step" : f->step_unit;
        for (const SiteFinding& l : f->leaks) add(l.site, l.device, l.memory, false, unit, l.bytes_per_step, in_b);
        for (const WithinStepLeak& l : f->within_step) add(l.site, l.device, l.memory, true, l.unit, l.bytes_per_unit, in_b);
    }
    for (auto& [k, d] : by_site) {
        d.change = change_of(d.a, d.b);
        out.push_back(std::move(d));
    }
    std::stable_sort(out.begin(), out.end(), [](const LeakDiff& x, const LeakDiff& y) {
        return x.change != y.change ? x.change < y.change : std::max(x.a, x.b) > std::max(y.a, y.b);
    });
}

std::string change_words(uint64_t a, uint64_t b) {
    if (a == b) return "=";
    std::string s = signed_bytes(double(b) - double(a));
    if (a) s += " (" + std::string(b < a ? "-" : "+") + format_percent(std::fabs(double(b) - double(a)) / double(a)) + ")";
    return s;
}

}  // namespace

std::string_view name(LeakChange c) {
    switch (c) {
    case LeakChange::gone: return "gone";
    case LeakChange::added: return "new";
    case LeakChange::changed: return "changed";
    case LeakChange::same: return "same";
    }
    return "?";
}

RunDiff diff_runs(const Findings& a, const Findings& b) {
    RunDiff d;
    d.a_source = a.source, d.b_source = b.source;
    d.a_verdict = a.verdict, d.b_verdict = b.verdict;
    std::vector<uint16_t> devices;
    for (const Findings* f : {&a, &b})
        for (const DevicePeak& p : f->peaks)
            if (std::find(devices.begin(), devices.end(), p.device) == devices.end()) devices.push_back(p.device);
    std::sort(devices.begin(), devices.end());
    for (uint16_t device : devices) {
        const DevicePeak* in_a = peak_on(a, device);
        d.peaks.push_back(peak_diff(device, (in_a ? a : b).device_name(device), in_a, peak_on(b, device)));
    }
    add_leaks(a, b, d.leaks);
    return d;
}

std::string render_diff_terminal(const RunDiff& d, bool color) {
    const auto bold = [&](const std::string& s) { return color ? "\x1b[1m" + s + "\x1b[0m" : s; };
    std::string o = bold("vramscope diff") + "  A " + terminal_safe(base_name(d.a_source)) + " (" + std::string(name(d.a_verdict)) +
                    ")  ->  B " + terminal_safe(base_name(d.b_source)) + " (" + std::string(name(d.b_verdict)) + ")\n";
    const auto cell = [](std::string s, size_t w) { return s.size() >= w ? s.substr(0, w - 2) + "~ " : s + std::string(w - s.size(), ' '); };
    for (const PeakDiff& p : d.peaks) {
        o += "\n" + bold("Peak") + " " + p.device_name + "\n";
        o += "  " + cell("", 18) + cell("A", 13) + cell("B", 13) + "B - A\n";
        o += "  " + cell("allocated", 18) + cell(format_bytes(double(p.a)), 13) + cell(format_bytes(double(p.b)), 13) +
             change_words(p.a, p.b) + "\n";
        for (size_t c = 0; c < kPeakCategories; ++c) {
            if (!p.a_categories[c] && !p.b_categories[c]) continue;
            o += "    " + cell(std::string(name(PeakCategory(c))), 16) + cell(format_bytes(double(p.a_categories[c])), 13) +
                 cell(format_bytes(double(p.b_categories[c])), 13) + change_words(p.a_categories[c], p.b_categories[c]) + "\n";
        }
        for (size_t k = 0; k < p.sites.size() && k < 5; ++k) {
            const PeakDiff::Site& s = p.sites[k];
            o += "    " + cell(format_bytes(double(s.a)), 13) + cell(format_bytes(double(s.b)), 13) + terminal_safe(site_words(s.site)) + "\n";
        }
        for (size_t k = 0; k < p.modules.size() && k < 5; ++k) {
            const PeakDiff::Module& m = p.modules[k];
            o += "    " + cell(format_bytes(double(m.a)), 13) + cell(format_bytes(double(m.b)), 13) +
                 (m.module.empty() ? std::string("outside any module") : "module " + terminal_safe(m.module)) + "\n";
        }
    }
    o += "\n" + bold("Leaks") + "\n";
    if (d.leaks.empty()) o += "  none in either run\n";
    for (const LeakDiff& l : d.leaks) {
        const std::string per = "/" + terminal_safe(l.unit);
        o += "  " + cell(std::string(name(l.change)), 9) + cell(l.a > 0 ? "+" + format_bytes(l.a) + per : "-", 24) +
             cell(l.b > 0 ? "+" + format_bytes(l.b) + per : "-", 24) + terminal_safe(site_words(l.site)) +
             (l.within_step ? " (inside a step)" : "") + "\n";
    }
    return o;
}

std::string render_diff_json(const RunDiff& d) {
    Json j;
    const auto line = [&](const SourceLine& s) { write_source_line(j, s); };
    j.open('{');
    j.field("schema", "vramscope.diff");
    j.field("schema_version", uint64_t(1));
    for (const auto& [side, source, verdict] : {std::tuple{"a", &d.a_source, d.a_verdict}, std::tuple{"b", &d.b_source, d.b_verdict}}) {
        j.key(side);
        j.open('{');
        j.field("source", *source);
        j.field("verdict", name(verdict));
        j.close('}');
    }
    j.key("peaks");
    j.open('[');
    for (const PeakDiff& p : d.peaks) {
        j.open('{');
        j.field("device", uint64_t(p.device));
        j.field("a", p.a);
        j.field("b", p.b);
        j.field("change", int64_t(p.b) - int64_t(p.a));
        j.key("categories");
        j.open('[');
        for (size_t c = 0; c < kPeakCategories; ++c) {
            j.open('{');
            j.field("category", name(PeakCategory(c)));
            j.field("a", p.a_categories[c]);
            j.field("b", p.b_categories[c]);
            j.field("change", int64_t(p.b_categories[c]) - int64_t(p.a_categories[c]));
            j.close('}');
        }
        j.close(']');
        j.key("sites");
        j.open('[');
        for (const PeakDiff::Site& s : p.sites) {
            j.open('{');
            j.key("site");
            line(s.site);
            j.field("a", s.a);
            j.field("b", s.b);
            j.close('}');
        }
        j.close(']');
        j.key("modules");
        j.open('[');
        for (const PeakDiff::Module& m : p.modules) {
            j.open('{');
            j.field("module", m.module);
            j.field("a", m.a);
            j.field("b", m.b);
            j.close('}');
        }
        j.close(']');
        j.close('}');
    }
    j.close(']');
    j.key("leaks");
    j.open('[');
    for (const LeakDiff& l : d.leaks) {
        j.open('{');
        j.field("change", name(l.change));
        j.key("site");
        line(l.site);
        j.field("device", uint64_t(l.device));
        j.field("memory", name(l.memory));
        j.field("within_step", l.within_step);
        j.field("unit", l.unit);
        j.bytes_field("a", l.a);
        j.bytes_field("b", l.b);
        j.close('}');
    }
    j.close(']');
    j.close('}');
    return j.out + "\n";
}

std::string render_diff_html(const RunDiff& d) {
    const auto td = [](const std::string& s) { return "<td>" + html_escape(s) + "</td>"; };
    std::string o = "<!doctype html><html><head><meta charset=\"utf-8\"><title>" +
                    html_escape(page_title("vramscope diff", {d.a_source, d.b_source})) + "</title><style>"
                    "body{font:14px system-ui,sans-serif;max-width:1100px;margin:20px auto;padding:0 20px}"
                    "table{border-collapse:collapse;width:100%;margin:8px 0 20px}th,td{text-align:left;padding:5px 9px;"
                    "border-bottom:1px solid #d8dee6}.less{color:#2e7d32}.more{color:#c62828}</style></head><body>";
    o += "<h1>vramscope diff</h1><p>A: " + html_escape(d.a_source) + " (" + std::string(name(d.a_verdict)) + ")<br>B: " +
         html_escape(d.b_source) + " (" + std::string(name(d.b_verdict)) + ")</p>";
    const auto moved = [](uint64_t a, uint64_t b) {
        return std::string("<td class=\"") + (b < a ? "less" : b > a ? "more" : "") + "\">" + html_escape(change_words(a, b)) + "</td>";
    };
    for (const PeakDiff& p : d.peaks) {
        o += "<h2>Peak, " + html_escape(p.device_name) + "</h2><table class=\"peak\"><tr><th></th><th>A</th><th>B</th><th>B - A</th></tr>";
        o += "<tr><th>allocated</th>" + td(format_bytes(double(p.a))) + td(format_bytes(double(p.b))) + moved(p.a, p.b) + "</tr>";
        for (size_t c = 0; c < kPeakCategories; ++c)
            if (p.a_categories[c] || p.b_categories[c])
                o += "<tr data-category=\"" + std::string(name(PeakCategory(c))) + "\">" + td(std::string(name(PeakCategory(c)))) +
                     td(format_bytes(double(p.a_categories[c]))) + td(format_bytes(double(p.b_categories[c]))) +
                     moved(p.a_categories[c], p.b_categories[c]) + "</tr>";
        o += "</table><table class=\"sites\"><tr><th>site</th><th>A</th><th>B</th></tr>";
        for (const PeakDiff::Site& s : p.sites)
            o += "<tr>" + td(site_words(s.site)) + td(format_bytes(double(s.a))) + td(format_bytes(double(s.b))) + "</tr>";
        o += "</table><table class=\"modules\"><tr><th>module</th><th>A</th><th>B</th></tr>";
        for (const PeakDiff::Module& m : p.modules)
            o += "<tr>" + td(m.module.empty() ? "outside any module" : m.module) + td(format_bytes(double(m.a))) +
                 td(format_bytes(double(m.b))) + "</tr>";
        o += "</table>";
    }
    o += "<h2>Leaks</h2><table class=\"leaks\"><tr><th>change</th><th>A</th><th>B</th><th>site</th></tr>";
    for (const LeakDiff& l : d.leaks)
        o += "<tr>" + td(std::string(name(l.change))) + td(l.a > 0 ? "+" + format_bytes(l.a) + "/" + l.unit : "-") +
             td(l.b > 0 ? "+" + format_bytes(l.b) + "/" + l.unit : "-") +
             td(site_words(l.site) + (l.within_step ? " (inside a step)" : "")) + "</tr>";
    return o + "</table></body></html>\n";
}

}  // namespace vramscope
