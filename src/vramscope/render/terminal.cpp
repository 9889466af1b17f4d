#include "render/terminal.h"

#include <cstdio>

#include "common/format.h"
#include "findings/json.h"

namespace vramscope {
namespace {

struct Style {
    bool on;
    std::string wrap(const char* code, const std::string& s) const { return on ? std::string("\x1b[") + code + "m" + s + "\x1b[0m" : s; }
    std::string bold(const std::string& s) const { return wrap("1", s); }
    std::string red(const std::string& s) const { return wrap("1;31", s); }
    std::string green(const std::string& s) const { return wrap("1;32", s); }
    std::string dim(const std::string& s) const { return wrap("2", s); }
};

std::string where(const SourceLine& s) {
    if (s.line == 0 && s.function.empty()) return terminal_safe(s.file);
    return terminal_safe(base_name(s.file) + ":" + std::to_string(s.line) + " " + s.function);
}

std::string per_step(double bytes) { return (bytes >= 0 ? "+" : "") + format_bytes(bytes) + "/step"; }

std::string fit(std::string s, size_t width) {
    if (s.size() >= width) return s.substr(0, width - 2) + "~ ";  // a cut column still ends in a space
    return s + std::string(width - s.size(), ' ');
}

// Installed packages' paths lose their prefix: "…/site-packages/torch/nn/functional.py".
std::string short_path(const std::string& file) {
    const size_t at = file.find("/site-packages/");
    return at == std::string::npos ? file : "..." + file.substr(at);
}

std::string hex(uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
}

std::string stream_label(uint64_t stream) { return stream == 0 ? "default" : "side " + hex(stream); }

// Words of `text` in lines of at most `width` columns, continuation lines indented to `indent`
// (the first line starts there already): explanations stay readable in a 100-column terminal.
std::string wrap(const std::string& text, size_t indent, size_t width) {
    std::string out;
    size_t column = indent, start = 0;
    while (start < text.size()) {
        size_t end = text.find(' ', start);
        if (end == std::string::npos) end = text.size();
        const size_t word = end - start;
        if (column > indent && column + 1 + word > width) {
            out += "\n" + std::string(indent, ' ');
            column = indent;
        } else if (column > indent) {
            out += ' ';
            ++column;
        }
        out.append(text, start, word);
        column += word;
        start = end + 1;
    }
    return out;
}

const char* steps_source_words(const std::string& source) {
    if (source == "markers") return "vramscope step markers";
    if (source == "optimizer-annotations") return "optimizer.step() annotations";
    if (source == "inferred-period") return "the repeating allocation pattern";
    return "nowhere (no steps found)";
}

}  // namespace

std::string render_summary(const Findings& f, bool color, size_t max_leaks) {
    const Style st{color};
    std::string o;
    o += st.bold("vramscope") + "  " + terminal_safe(base_name(f.source)) + st.dim("  (" + f.format + ", " + format_count(f.event_count) + " events)") + "\n";
    o += st.dim(wrap("steps: " + format_count(f.step_count) + " from " + steps_source_words(f.steps_source) +
                         (f.steps_detail.empty() ? "" : " [" + terminal_safe(f.steps_detail) + "]") + "; first " +
                         std::to_string(f.warmup_steps) + " treated as warm-up; window " + std::to_string(f.window),
                     7, 100)) + "\n";
    for (const auto& w : f.warnings) o += st.red("warning: ") + terminal_safe(w) + "\n";
    o += "\n";
    if (!f.input_faults.empty()) {
        o += st.red("CANNOT JUDGE") + "  the input cannot be trusted, so no verdict:\n";
        for (const auto& why : f.input_faults) o += "  " + wrap(terminal_safe(why), 2, 100) + "\n";
    } else if (f.verdict == "leak") {
        const SiteFinding& top = f.leaks.front();
        std::string head = "LEAK  " + per_step(f.leak_bytes_per_step) + " since step " + std::to_string(top.first_step);
        o += st.red(head);
        if (f.projected_oom_step) o += st.red("  ·  OOM projected at step " + format_count(*f.projected_oom_step));
        else o += st.dim("  ·  OOM step unknown (pass --device-memory 80GiB)");
        o += "\n\n";
        o += st.dim("  #  growth/step     site                                    stream            first  conf") + "\n";
        size_t shown = 0;
        for (const SiteFinding& l : f.leaks) {
            if (shown == max_leaks) {
                o += st.dim("  ... " + std::to_string(f.leaks.size() - shown) + " more in --json") + "\n";
                break;
            }
            ++shown;
            char conf[16];
            std::snprintf(conf, sizeof conf, "%.2f", l.confidence);
            o += "  " + fit(std::to_string(shown), 3) + fit(per_step(l.bytes_per_step), 16) + fit(where(l.site), 40) +
                 fit(stream_label(l.stream), 18) + fit(std::to_string(l.first_step), 7) + conf + "\n";
            size_t frames = 0;
            for (const SourceLine& s : l.stack) {
                if (frames++ == 4) break;
                o += st.dim(terminal_safe("       at " + s.function + "  " + short_path(s.file) + ":" + std::to_string(s.line))) + "\n";
            }
        }
        for (const DeviceSummary& d : f.devices)
            for (const StreamUsage& s : d.streams)
                if (s.stream != 0 && s.leaked_bytes > 0)
                    o += "\n  " + wrap("side stream " + hex(s.stream) + " on cuda:" + std::to_string(d.device) +
                                       " holds " + format_bytes(double(s.leaked_bytes)) +
                                       " of leaked blocks: work on it may never have been synchronized "
                                       "or its tensors released",
                                   2, 100) + "\n";
    } else {
        o += st.green("NO LEAK") + "  memory at step end does not accumulate";
        if (!f.devices.empty() && f.step_count > 0) {
            const auto& tl = f.devices.front().timeline;
            o += st.dim("  (allocated " + format_bytes(double(tl[f.warmup_steps < f.step_count ? f.warmup_steps : 0].allocated)) +
                        " -> " + format_bytes(double(tl[f.step_count - 1].allocated)) + ")");
        }
        o += "\n";
    }
    if (!f.not_leaks.empty()) {
        o += "\n" + st.bold("Not leaks") + st.dim(" (growth you may see, explained)") + "\n";
        for (const NotLeak& n : f.not_leaks) {
            // Warm-up names its sites in its text already.
            const std::string at = n.site && n.kind != "warm-up" ? " [" + where(*n.site) + "]" : "";
            o += "  " + fit(n.kind, 17) + fit(format_bytes(double(n.bytes)), 11) + wrap(terminal_safe(n.why) + at, 30, 100) + "\n";
        }
    }
    for (const auto& n : f.notes) o += "\n" + st.bold("note: ") + terminal_safe(n, true) + "\n";
    return o;
}

std::string render_ranks(const RankComparison& ranks, bool color) {
    if (ranks.rows.empty()) return "";
    const char* bold = color ? "\033[1m" : "";
    const char* red = color ? "\033[1;31m" : "";
    const char* reset = color ? "\033[0m" : "";
    std::string out = std::string("\n") + bold + "Ranks" + reset + "\n  rank  leak/step       allocated     peak\n";
    for (const RankRow& r : ranks.rows) {
        char line[128];
        std::snprintf(line, sizeof line, "  %-5d %-15s %-13s %s\n", r.rank,
                      r.leak_bytes_per_step > 0 ? ("+" + format_bytes(r.leak_bytes_per_step)).c_str() : "none",
                      format_bytes(double(r.allocated)).c_str(), format_bytes(double(r.peak_allocated)).c_str());
        out += line;
    }
    for (const std::string& s : ranks.skew) out += std::string("  ") + red + "RANK SKEW" + reset + "  " + terminal_safe(s) + "\n";
    if (ranks.skew.empty()) out += "  the ranks agree\n";
    return out;
}

}  // namespace vramscope
