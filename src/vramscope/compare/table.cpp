#include "compare/table.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>

#include "common/format.h"
#include "compare/status.h"
#include "findings/json_writer.h"

namespace vramscope {
namespace {

// One mode's rows, judged once for every renderer.
struct JudgedRow {
    const CompareRow* row;
    const CellResult* cell;
    CellJudgement judgement;
};

// A leak of the mode, where it was found first and which rows remove it.
struct ChainLink {
    const CellLeak* leak;
    std::string found_in;                // "baseline", or the row it is new in
    std::vector<std::string> gone_with;  // a baseline leak's: rows judged without a leak at this code
};

struct ModeTable {
    std::string mode;
    const CellResult* baseline;
    std::vector<JudgedRow> rows;
    std::vector<ChainLink> chain;
};

bool leaks_at(const CellResult& cell, const std::string& site_key) {
    for (const CellLeak& l : cell.leaks)
        if (l.site_key == site_key) return true;
    return false;
}

bool comparable(const CellJudgement& j) { return j.status != CellStatus::broken && j.status != CellStatus::unknown; }

std::vector<ModeTable> judge(const CompareRun& run) {
    std::vector<ModeTable> tables;
    for (const std::string& mode : run.modes) {
        ModeTable t{mode, run.cell(mode, run.rows[0].name), {}, {}};
        for (const CompareRow& row : run.rows) {
            const CellResult* cell = run.cell(mode, row.name);
            t.rows.push_back({&row, cell, judge_against(*cell, *t.baseline)});
        }
        std::set<std::string> listed;
        for (const JudgedRow& r : t.rows) {
            if (r.cell->verdict != Verdict::leak) continue;
            for (const CellLeak& leak : r.cell->leaks) {
                if (!listed.insert(leak.site_key).second) continue;
                ChainLink link{&leak, r.row->name, {}};
                if (r.cell == t.baseline)
                    for (const JudgedRow& other : t.rows)
                        if (other.cell != r.cell && comparable(other.judgement) && !leaks_at(*other.cell, leak.site_key))
                            link.gone_with.push_back(other.row->name);
                t.chain.push_back(std::move(link));
            }
        }
        tables.push_back(std::move(t));
    }
    return tables;
}

std::string verdict_word(const CellResult& c) {
    if (!c.analysed) return "-";
    switch (c.verdict) {
        case Verdict::leak: return "LEAK";
        case Verdict::no_leak: return "no leak";
        case Verdict::cannot_judge: return "?";
    }
    return "?";
}
std::string rate(const CellResult& c) { return c.analysed && c.leak_bytes_per_step > 0 ? "+" + format_bytes(c.leak_bytes_per_step) : "-"; }
std::string bytes_or_dash(const CellResult& c, uint64_t b) { return c.analysed ? format_bytes(double(b)) : "-"; }
// Live tensors on the host: nothing is reserved beyond what is allocated, so there is no figure to show.
std::string reserved(const CellResult& c) { return c.host_memory_only ? "-" : bytes_or_dash(c, c.peak_reserved); }
std::string step_or_dash(const std::optional<int64_t>& s) { return s ? std::to_string(*s) : "-"; }
std::string oom(const CellResult& c) {
    if (c.oom_step) return "step " + std::to_string(*c.oom_step);
    return c.outcome == CellOutcome::out_of_memory ? "yes" : "-";
}
std::string saved(const JudgedRow& r) {
    if (r.judgement.status == CellStatus::baseline || !comparable(r.judgement)) return "-";
    return format_bytes(r.judgement.saved_bytes);
}
std::string top_site(const CellResult& c) {
    if (c.verdict != Verdict::leak || c.leaks.empty()) return "";
    return c.leaks[0].site + (c.leaks[0].side_stream ? " (side stream)" : "");
}
std::string duration(double seconds) {
    char buf[32];
    if (seconds >= 60) std::snprintf(buf, sizeof buf, "%dm %02ds", int(seconds) / 60, int(seconds) % 60);
    else std::snprintf(buf, sizeof buf, "%.1f s", seconds);
    return buf;
}
std::string joined(const std::vector<std::string>& items, const char* sep) {
    std::string out;
    for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
    return out;
}
std::vector<std::string> thresholds() {
    return {"root-cause fix: leak rate at most " + format_percent(kFixAtMost) + " of the baseline's, and no OOM",
            "partial: at most " + format_percent(kPartialAtMost) + "; no effect: under " +
                format_percent(kWorseAtLeast) + "; worse: " + format_percent(kWorseAtLeast) +
                " or more, or a leak the baseline lacks",
            "lower/higher peak: the leak as no effect, the peak moved by max(" + format_percent(kPeakShare) + ", " +
                format_bytes(double(kPeakBytes)) + ")",
            "broken: crashed, timed out, or out of memory where the baseline was not",
            "saved: (the baseline's rate - the row's) x the baseline's steps"};
}
std::string baseline_line(const CellResult& b) {
    if (!b.analysed) return "baseline not analysed" + (b.reason.empty() ? "" : ": " + b.reason);
    if (b.verdict == Verdict::cannot_judge) return "baseline: cannot judge";
    if (b.verdict == Verdict::no_leak) return "baseline: no leak, peak " + format_bytes(double(b.peak_allocated));
    std::string s = "baseline: leak " + rate(b) + "/step since step " + step_or_dash(b.growth_start_step) + ", peak " +
                    format_bytes(double(b.peak_allocated));
    if (b.oom_step) return s + ", out of memory at step " + std::to_string(*b.oom_step);
    return b.projected_oom_step ? s + ", OOM projected at step " + format_count(uint64_t(*b.projected_oom_step)) : s;
}

// -- terminal ------------------------------------------------------------------------------------
std::string fit(std::string s, size_t width) {  // the last column: cut, not padded
    s = terminal_safe(s);
    return s.size() > width ? s.substr(0, width - 1) + "~" : s;
}
std::string cut(const std::string& s, size_t width) {
    std::string out = fit(s, width);
    return out + std::string(width - out.size(), ' ');
}

}  // namespace

std::string render_compare_terminal(const CompareRun& run) {
    std::string out = "vramscope compare  " + terminal_safe(joined(run.command, " ")) + "\n";
    out += count_of(run.cells.size(), "cell") + " (" + count_of(run.rows.size(), "row") + " x " +
           count_of(run.modes.size(), "mode") + ") in " + duration(run.wall_seconds) +
           (run.step_limit ? ", at most " + std::to_string(run.step_limit) + " steps each" : "") +
           (run.complete ? "" : "; INTERRUPTED: the cells not run are marked") + "\n";
    for (const ModeTable& t : judge(run)) {
        out += "\nmode " + terminal_safe(t.mode) + "  " + terminal_safe(baseline_line(*t.baseline)) + "\n";
        out += "  " + cut("row", 16) + cut("verdict", 8) + cut("leak/step", 11) + cut("peak", 10) + cut("reserved", 10) +
               cut("OOM", 9) + cut("since", 6) + cut("status", 15) + "saved\n";
        for (const JudgedRow& r : t.rows) {
            const CellResult& c = *r.cell;
            out += "  " + cut(r.row->name, 16) + cut(verdict_word(c), 8) + cut(rate(c), 11) +
                   cut(bytes_or_dash(c, c.peak_allocated), 10) + cut(reserved(c), 10) +
                   cut(oom(c), 9) + cut(step_or_dash(c.growth_start_step), 6) +
                   cut(std::string(name(r.judgement.status)), 15) + terminal_safe(saved(r)) + "\n";
            std::string detail = r.judgement.why, site = top_site(c);
            if (!site.empty()) detail += (detail.empty() ? "" : "; ") + site;
            if (!detail.empty()) out += "  " + std::string(16, ' ') + "`- " + fit(detail, 78) + "\n";
        }
        if (!t.chain.empty()) out += "  root cause\n";
        for (const ChainLink& link : t.chain) {
            const CellLeak& l = *link.leak;
            out += "    " + terminal_safe(l.site) + "  +" + format_bytes(l.bytes_per_step) + "/step from step " +
                   std::to_string(l.first_step) + ", " + (l.side_stream ? "side stream" : "default stream") +
                   (link.found_in == "baseline" ? "" : ", new in " + terminal_safe(link.found_in)) + "\n";
            out += "      held by " + (l.owner.empty() ? std::string("(no owner found)") : terminal_safe(l.owner)) + "\n";
            if (link.found_in == "baseline")
                out += "      gone with: " + (link.gone_with.empty() ? std::string("none of the rows")
                                                                      : terminal_safe(joined(link.gone_with, ", "))) + "\n";
        }
    }
    out += "\nrows\n";
    for (const CompareRow& row : run.rows)
        out += "  " + cut(row.name, 16) + terminal_safe(row.label.empty() ? joined(row.changes, "; ")
                                                       : row.label + (row.changes.empty() ? "" : " (" + joined(row.changes, "; ") + ")")) + "\n";
    out += "statuses\n";
    for (const std::string& rule : thresholds()) out += "  " + rule + "\n";
    return out;
}

// -- Markdown ------------------------------------------------------------------------------------
namespace {
// The one rule for text from the run (labels, sites, owners, names) in Markdown: shown as written,
// never markup. Control characters become visible escapes (terminal_safe); HTML's specials become
// entities (no tag, no comment, no autolink); Markdown's own are escaped with a backslash (no
// link, emphasis or code span); line breaks become spaces and pipes stay inside their cell.
std::string md(std::string_view text) {
    std::string out;
    for (char c : terminal_safe(text)) {
        switch (c) {
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '&': out += "&amp;"; break;
            case '\n': case '\r': out += ' '; break;
            case '|': case '\\': case '`': case '*': case '_': case '[': case ']': case '#': case '!':
                out += '\\';
                out += c;
                break;
            default: out += c;
        }
    }
    return out;
}
}  // namespace

std::string render_compare_markdown(const CompareRun& run) {
    std::string out = "### vramscope compare: " + md(joined(run.command, " ")) + "\n\n";
    out += count_of(run.cells.size(), "cell") + ", " + duration(run.wall_seconds) +
           (run.step_limit ? ", at most " + std::to_string(run.step_limit) + " steps each" : "") +
           (run.complete ? "" : " (**interrupted**)") + ".\n";
    for (const ModeTable& t : judge(run)) {
        out += "\n#### Mode " + md(t.mode) + ": " + md(baseline_line(*t.baseline)) + "\n\n";
        out += "| Row | Changes | Verdict | Leak/step | Peak allocated | Peak reserved | OOM | Growth from step | Top leak site | Status | Growth saved |\n";
        out += "|---|---|---|---|---|---|---|---|---|---|---|\n";
        for (const JudgedRow& r : t.rows) {
            const CellResult& c = *r.cell;
            std::string status = std::string(name(r.judgement.status));
            if (!r.judgement.why.empty()) status += " (" + r.judgement.why + ")";
            out += "| " + md(r.row->label.empty() ? r.row->name : r.row->name + ": " + r.row->label) + " | " +
                   md(joined(r.row->changes, "; ")) + " | " + verdict_word(c) + " | " + rate(c) + " | " +
                   bytes_or_dash(c, c.peak_allocated) + " | " + reserved(c) + " | " + oom(c) +
                   " | " + step_or_dash(c.growth_start_step) + " | " + md(top_site(c)) + " | **" + md(status) +
                   "** | " + saved(r) + " |\n";
        }
        if (!t.chain.empty()) out += "\nRoot cause chain:\n";
        for (const ChainLink& link : t.chain) {
            const CellLeak& l = *link.leak;
            out += "- " + md(l.site) + " +" + format_bytes(l.bytes_per_step) + "/step from step " +
                   std::to_string(l.first_step) + ", " + (l.side_stream ? "side stream" : "default stream") +
                   (link.found_in == "baseline" ? "" : ", new in " + md(link.found_in)) + "; held by " +
                   (l.owner.empty() ? std::string("(no owner found)") : md(l.owner)) +
                   (link.found_in != "baseline" ? std::string()
                    : "; gone with: " + (link.gone_with.empty() ? std::string("none") : md(joined(link.gone_with, ", ")))) +
                   "\n";
        }
    }
    out += "\nStatuses: " + joined(thresholds(), "; ") + ".\n";
    return out;
}

// -- JSON ----------------------------------------------------------------------------------------
std::string render_compare_json(const CompareRun& run) {
    Json j;
    j.open('{');
    j.field("schema", "vramscope.compare.table");
    j.field("schema_version", uint64_t(1));
    j.key("thresholds");
    j.open('{');
    j.field("fix_at_most", kFixAtMost);
    j.field("partial_at_most", kPartialAtMost);
    j.field("worse_at_least", kWorseAtLeast);
    j.close('}');
    j.field("wall_seconds", run.wall_seconds);
    j.key("modes");
    j.open('[');
    for (const ModeTable& t : judge(run)) {
        j.open('{');
        j.field("mode", t.mode);
        j.key("cells");
        j.open('[');
        for (const JudgedRow& r : t.rows) {
            const CellResult& c = *r.cell;
            j.open('{');
            j.field("row", r.row->name);
            j.field("outcome", name(c.outcome));
            j.key("verdict");
            if (c.analysed) j.value(name(c.verdict)); else j.null();
            j.bytes_field("leak_bytes_per_step", c.leak_bytes_per_step);
            j.field("peak_allocated", c.peak_allocated);
            j.field("peak_reserved", c.peak_reserved);
            for (auto [key, value] : {std::pair{"oom_step", c.oom_step}, {"projected_oom_step", c.projected_oom_step},
                                      {"growth_start_step", c.growth_start_step}}) {
                j.key(key);
                if (value) j.value(uint64_t(*value)); else j.null();
            }
            j.field("top_site", top_site(c));
            j.field("status", name(r.judgement.status));
            j.field("why", r.judgement.why);
            j.bytes_field("saved_bytes", r.judgement.saved_bytes);
            j.field("wall_seconds", c.wall_seconds);
            j.field("report", c.report);
            j.field("log", c.log);
            j.close('}');
        }
        j.close(']');
        j.key("root_cause");
        j.open('[');
        for (const ChainLink& link : t.chain) {
            j.open('{');
            j.field("site", link.leak->site);
            j.field("stream_kind", link.leak->side_stream ? "side" : "default");
            j.bytes_field("bytes_per_step", link.leak->bytes_per_step);
            j.field("first_step", uint64_t(link.leak->first_step));
            j.field("owner", link.leak->owner);
            j.field("found_in", link.found_in);
            j.key("gone_with");
            j.open('[');
            for (const std::string& row : link.gone_with) j.value(row);
            j.close(']');
            j.close('}');
        }
        j.close(']');
        j.close('}');
    }
    j.close(']');
    j.close('}');
    return j.out + "\n";
}

// -- HTML ----------------------------------------------------------------------------------------
namespace {
std::string html(std::string_view s) { return html_escape(s); }
std::string td(const std::string& s) { return "<td>" + html(s) + "</td>"; }
// A link to a cell's file, as the runner writes it (cells/MODE/ROW/report.html): a relative path of
// plain characters only, so never a scheme (javascript:, data:), a host or an absolute path.
std::string link(const std::string& path, const char* text) {
    const bool plain = !path.empty() && path[0] != '/' && std::all_of(path.begin(), path.end(), [](char c) {
        return std::isalnum(uint8_t(c)) || c == '.' || c == '_' || c == '+' || c == '-' || c == '/';
    });
    return plain ? "<a href=\"" + html(path) + "\">" + text + "</a> " : "";
}
}  // namespace

std::string render_compare_html(const CompareRun& run) {
    std::string out =
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>vramscope compare: " + html(joined(run.command, " ")) +
        "</title><style>"
        "body{font:14px system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#f4f4f4}"
        ".fix{background:#d9f2d9}.partial{background:#fff3cd}.worse,.broken{background:#f8d7da}"
        "code{font-size:13px}</style></head><body>";
    out += "<h1>vramscope compare</h1><p><code>" + html(joined(run.command, " ")) + "</code><br>" +
           count_of(run.cells.size(), "cell") + ", " + html(duration(run.wall_seconds)) +
           (run.complete ? "" : " (interrupted)") + "</p>";
    for (const ModeTable& t : judge(run)) {
        out += "<h2>Mode " + html(t.mode) + "</h2><p>" + html(baseline_line(*t.baseline)) + "</p><table><tr>";
        for (const char* h : {"Row", "Changes", "Verdict", "Leak/step", "Peak allocated", "Peak reserved", "OOM",
                              "Growth from step", "Top leak site", "Status", "Growth saved", "Cell"})
            out += std::string("<th>") + h + "</th>";
        out += "</tr>";
        for (const JudgedRow& r : t.rows) {
            const CellResult& c = *r.cell;
            const CellStatus s = r.judgement.status;
            const char* cls = s == CellStatus::fix || s == CellStatus::lower_peak ? "fix"
                            : s == CellStatus::partial                          ? "partial"
                            : s == CellStatus::worse || s == CellStatus::higher_peak ? "worse"
                            : s == CellStatus::broken                           ? "broken"
                                                                                : "";
            out += std::string("<tr class=\"") + cls + "\">" + td(r.row->label.empty() ? r.row->name : r.row->name + ": " + r.row->label) +
                   td(joined(r.row->changes, "; ")) + td(verdict_word(c)) + td(rate(c)) +
                   td(bytes_or_dash(c, c.peak_allocated)) + td(reserved(c)) + td(oom(c)) +
                   td(step_or_dash(c.growth_start_step)) + td(top_site(c)) +
                   td(std::string(name(s)) + (r.judgement.why.empty() ? "" : " (" + r.judgement.why + ")")) +
                   td(saved(r)) + "<td>" + link(c.report, "report") + link(c.log, "log") + "</td></tr>";
        }
        out += "</table>";
        if (!t.chain.empty()) out += "<h3>Root cause chain</h3><ul>";
        for (const ChainLink& link : t.chain) {
            const CellLeak& l = *link.leak;
            out += "<li><code>" + html(l.site) + "</code> +" + html(format_bytes(l.bytes_per_step)) + "/step from step " +
                   std::to_string(l.first_step) + ", " + (l.side_stream ? "side stream" : "default stream") +
                   (link.found_in == "baseline" ? "" : ", new in " + html(link.found_in)) + "<br>held by <code>" +
                   html(l.owner.empty() ? "(no owner found)" : l.owner) + "</code>" +
                   (link.found_in != "baseline" ? std::string()
                    : "<br>gone with: " + html(link.gone_with.empty() ? "none of the rows" : joined(link.gone_with, ", "))) +
                   "</li>";
        }
        if (!t.chain.empty()) out += "</ul>";
    }
    out += "<p>Statuses: " + html(joined(thresholds(), "; ")) + ".</p></body></html>\n";
    return out;
}

}  // namespace vramscope
