#include "render/terminal.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "common/format.h"
#include "findings/json.h"
#include "findings/shown.h"

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

// head + tail in at most `width` columns: the tail (a path) loses its start first, then the head its end.
std::string fit_left(const std::string& head, const std::string& tail, size_t width) {
    if (head.size() + tail.size() <= width) return head + tail;
    if (head.size() + 12 < width) return head + "..." + tail.substr(tail.size() - (width - head.size() - 3));
    return head.substr(0, width - 12) + "... " + tail.substr(tail.size() - 8);
}

// Installed packages' paths lose their prefix: "…/site-packages/torch/nn/functional.py".
std::string short_path(const std::string& file) {
    const size_t at = file.find("/site-packages/");
    return at == std::string::npos ? file : "..." + file.substr(at);
}

// "transformers " for a frame of site-packages/transformers/..., else nothing.
std::string package_of(const std::string& file) {
    const size_t at = file.find("-packages/");
    if (at == std::string::npos) return "";
    const size_t from = at + 10, to = file.find('/', from);
    return to == std::string::npos ? "" : terminal_safe(file.substr(from, to - from)) + " ";
}

std::string hex(uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
}

std::string stream_label(uint64_t stream) { return stream == 0 ? "default" : "side " + hex(stream); }

// " (created at train.py:40 main)" when capture named the stream, else nothing.
std::string stream_origin(const Findings& f, uint64_t stream) {
    const std::string_view label = f.meta_value("stream." + std::to_string(stream));
    return label.empty() ? "" : " (" + terminal_safe(std::string(label)) + ")";
}

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

// What one step is, as the report counts it ("optimizer step", "eval batch", "generate() call").
std::string unit_of(const Findings& f) { return f.step_unit.empty() ? "step" : terminal_safe(f.step_unit); }

std::string signed_bytes(int64_t bytes) { return (bytes > 0 ? "+" : "") + format_bytes(double(bytes)); }

// The line that stands for the entries not shown (findings/shown.h): "and 1,997 more bounded-cache
// sites, 49.9 MiB in all (--json lists them)". `total` is in words already; empty, it is left out.
std::string rest_line(size_t rest, const std::string& what, const std::string& total, const Style& st) {
    return st.dim("  and " + format_count(rest) + " more " + what + (total.empty() ? "" : ", " + total + " in all") +
                  " (--json lists them)") + "\n";
}

std::string devices_rest_line(const ShownDevices& shown, const Style& st) {
    return shown.rest ? rest_line(shown.rest, shown.rest == 1 ? "device" : "devices", "", st) : "";
}

// A ledger is of torch's allocated memory: the leaks outside it (a library's own device memory,
// pinned host memory) are named under it, a line each, or its "0 B" would read as no leak beside them.
std::vector<std::string> outside_the_ledger(const Findings& f, uint16_t device) {
    double rates[2] = {0, 0};  // device memory outside torch's allocator, pinned host memory
    std::vector<std::string> libraries[2];
    for (const SiteFinding& l : f.leaks) {
        if (l.device != device || l.memory == Memory::torch) continue;
        const int k = l.memory == Memory::pinned;
        rates[k] += l.bytes_per_step;
        if (!l.library.empty() && std::find(libraries[k].begin(), libraries[k].end(), l.library) == libraries[k].end())
            libraries[k].push_back(l.library);
    }
    std::vector<std::string> lines;
    for (int k = 0; k < 2; ++k) {
        if (rates[k] <= 0) continue;
        std::string by;
        for (const std::string& library : libraries[k]) by += (by.empty() ? " (" : ", ") + terminal_safe(library);
        lines.push_back("not in it: " + per_step(rates[k]) + " leaking in " +
                        (k ? "pinned host memory" : "device memory outside torch's allocator") + (by.empty() ? "" : by + ")"));
    }
    return lines;
}

// Where each device's growth at step ends went: the parts sum to it, unexplained always shown.
std::string render_ledger(const Findings& f, const ShownDevices& shown, const Style& st) {
    if (f.ledger.empty()) return "";
    std::string o = "\n" + st.bold("Ledger") +
                    st.dim(" (growth of allocated memory at step ends, every byte in one part)") + "\n";
    for (const DeviceLedger& l : f.ledger) {
        if (!shown.shows(l.device)) continue;
        o += "  " + f.device_name(l.device) + "  step " + std::to_string(l.from_step) + " -> " +
             std::to_string(l.to_step) + ": " + format_bytes(double(l.allocated_from)) + " -> " +
             format_bytes(double(l.allocated_to)) + "  (" + signed_bytes(l.growth) + ")\n";
        for (size_t p = 0; p < kLedgerParts; ++p) {
            const auto part = LedgerPart(p);
            if (l.parts[p] == 0 && part != LedgerPart::unexplained) continue;
            std::string line = "    " + fit(std::string(name(part)), 16) + fit(signed_bytes(l.parts[p]), 13);
            if (part == LedgerPart::unexplained) {
                line += st.dim("a verdict may leave " + format_bytes(double(l.unexplained_allowed)) + " open");
                if (!l.balanced()) line = st.red(line);
            }
            o += line + "\n";
        }
        for (const std::string& line : outside_the_ledger(f, l.device)) o += "    " + st.dim(wrap(line, 4, 100)) + "\n";
    }
    return o + devices_rest_line(shown, st);
}

// A frame as the stack lines show it: a shared object's frame (line 0) has no line to name.
std::string frame_place(const SourceLine& s) {
    return short_path(s.file) + (s.line == 0 && !is_cpp_file(s.file) ? "" : ":" + std::to_string(s.line));
}

// "head a + b + c" in lines of at most `width` columns, broken only between terms, continuation
// lines indented to `indent` (the first line starts there already): a sum stays readable.
std::string sum_lines(const std::string& head, const std::vector<std::string>& terms, size_t indent, size_t width) {
    std::string out = head;
    size_t column = indent + head.size();
    for (size_t i = 0; i < terms.size(); ++i) {
        const std::string term = (i ? "+ " : "") + terms[i];
        if (i && column + 1 + term.size() > width) {
            out += "\n" + std::string(indent, ' ');
            column = indent;
        } else if (i) {
            out += ' ';
            ++column;
        }
        out += term;
        column += term.size();
    }
    return out;
}

// Everything the process holds on each device, and pinned on the host, split by holder: NVML's
// figure where it was read, and the libraries' own memory wherever the capture saw any.
std::string render_usage(const Findings& f, const ShownDevices& shown, const Style& st) {
    std::string lines;
    uint64_t last = 0;  // the last full step end: the host's, and a device's where NVML read there or nowhere
    for (const UsageLedger& u : f.usage) last = std::max(last, u.step);
    for (const UsageLedger& u : f.usage) {
        if (u.device && !shown.shows(*u.device)) continue;
        std::vector<std::string> terms;
        if (u.device) terms.push_back("torch reserved " + format_bytes(double(u.torch_reserved)));
        uint64_t libraries = 0;
        for (const LibraryBytes& b : u.libraries) {
            std::string pool;  // a library that counted its pool: in use and cached, by its own count
            if (b.in_use) pool = " (" + format_bytes(double(*b.in_use)) + " in use, " + format_bytes(double(b.cached.value_or(0))) + " cached)";
            terms.push_back(terminal_safe(b.library) + " " + format_bytes(double(b.bytes)) + pool);
            libraries += b.bytes;
        }
        if (u.context) terms.push_back("CUDA context " + format_bytes(double(*u.context)));
        if (u.page_rounding.value_or(0)) terms.push_back("driver's pages " + format_bytes(double(*u.page_rounding)));
        if (u.unexplained) terms.push_back("unexplained " + format_bytes(double(*u.unexplained)));
        if (!u.device) {
            if (u.libraries.empty()) continue;
            lines += "  " + fit("host", 8) + sum_lines("pinned " + format_bytes(double(libraries)) + " = ", terms, 10, 100) +
                     "\n";
        } else if (u.nvml_used) {
            // NVML is not read at every step end: a device's ledger may be of an earlier one.
            const std::string when = u.step == last ? "" : st.dim("  (step " + format_count(u.step) + "'s end)");
            lines += "  " + fit(f.device_name(*u.device), 8) +
                     sum_lines("NVML " + format_bytes(double(*u.nvml_used)) + " = ", terms, 10, 100) + when + "\n";
        } else if (!u.libraries.empty()) {
            lines += "  " + fit(f.device_name(*u.device), 8) + sum_lines("", terms, 10, 100) +
                     st.dim("  (no NVML reading at a judged step end)") + "\n";
        }
    }
    if (lines.empty()) return "";
    return "\n" + st.bold("Usage") +
           st.dim(" (what the process holds at step " + format_count(last) + "'s end, by holder)") + "\n" + lines +
           devices_rest_line(shown, st);
}

// A stack as the summary shows it: at most `frames` lines from its first shown frame; between
// Python frames, the interpreter's own C++ frames say nothing (they are in the JSON).
std::string stack_block(const std::vector<SourceLine>& stack, size_t shown_from, const Style& st, size_t frames = 4) {
    const bool python = std::any_of(stack.begin(), stack.end(), [](const SourceLine& s) { return !is_cpp_file(s.file); });
    std::string o;
    size_t shown = 0;
    for (size_t i = shown_from; i < stack.size() && shown < frames; ++i) {
        if (python && is_cpp_file(stack[i].file)) continue;
        ++shown;
        o += st.dim(terminal_safe(fit_left("       at " + stack[i].function + "  ", frame_place(stack[i]), 100))) + "\n";
    }
    return o;
}

// Leaks no step end shows: each unit inside a step (a microbatch, an eval batch) keeps something
// until its step ends.
std::string render_within_step(const Findings& f, const Style& st) {
    std::string o;
    const Shown shown = shown_within_step(f.within_step, kSummaryShown.within_step);
    for (const size_t i : shown.entries) {
        const WithinStepLeak& l = f.within_step[i];
        const std::string unit = terminal_safe(l.unit);
        o += st.red(wrap("LEAK INSIDE A STEP  " + signed_bytes(int64_t(l.bytes_per_unit)) + " per " + unit + " at " +
                             where(l.site) + " (" + f.device_name(l.device) + ")",
                         2, 100)) + "\n";
        std::string why = "held until the " + unit_of(f) + " ends: " + count_of(l.units_per_step, unit) + " in step " +
                          format_count(l.step) + " added " + format_bytes(double(l.bytes_added)) + " to its peak";
        if (l.steps_seen > 1) why += " (seen in " + format_count(l.steps_seen) + " steps)";
        why += l.oom_units ? "; at " + count_of(*l.oom_units, unit) + " per step: out of memory" : "";
        o += "    " + wrap(why, 4, 100) + "\n" + stack_block(l.stack, l.stack_shown_from, st);
    }
    if (shown.rest)
        o += rest_line(shown.rest, "leaks inside a step", "+" + format_bytes(shown.rest_total) + " per unit", st);
    return o.empty() ? "" : "\n" + o;
}

// Each device at its highest moment: every byte in one category, the largest sites, what torch
// kept free then and what lay outside its allocator.
std::string render_peak(const Findings& f, const ShownDevices& shown, const Style& st) {
    std::string o;
    for (const DevicePeak& p : f.peaks) {
        if (p.bytes == 0 || !shown.shows(p.device)) continue;
        std::string when = "step " + format_count(p.step) + ", " + std::string(name(p.phase));
        if (p.microbatch) when += " after " + count_of(p.microbatch, kMicrobatchUnit);
        if (!p.module.empty()) when += ", in " + terminal_safe(p.module);
        o += "  " + f.device_name(p.device) + "  " + format_bytes(double(p.bytes)) + " allocated at " + when + "\n";
        for (size_t c = 0; c < kPeakCategories; ++c) {
            if (!p.categories[c]) continue;
            char share[16];
            std::snprintf(share, sizeof share, "%5.1f%%", 100.0 * double(p.categories[c]) / double(p.bytes));
            o += "    " + fit(std::string(name(PeakCategory(c))), 17) + fit(format_bytes(double(p.categories[c])), 12) +
                 st.dim(share) + "\n";
        }
        if (p.reserved > p.bytes) o += st.dim("    reserved " + format_bytes(double(p.reserved)) + ": " +
                                               format_bytes(double(p.reserved - p.bytes)) + " free in torch's cache then") + "\n";
        if (p.external) o += st.dim("    outside torch's allocator then: " + format_bytes(double(p.external))) + "\n";
        for (const DeviceSummary& d : f.devices)
            if (d.device == p.device && d.oom) {
                const OomRequest& r = *d.oom;
                o += "    " + wrap("out of memory at step " + format_count(r.step) + ": asked " + format_bytes(double(r.asked)) +
                                   "; free then: " + format_bytes(double(r.device_free)) + " on the device, " +
                                   format_bytes(double(r.cached_free)) + " in torch's cache, its largest block " +
                                   format_bytes(double(r.largest_free_block)) +
                                   (r.fragmentation() ? ": fragmentation, enough free in all but no block that large "
                                                        "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets segments grow)"
                                                      : ""),
                                   4, 100) + "\n";
            }
        if (!p.backward_marked && p.backward_inferred)
            o += st.dim("    " + wrap("backwards inferred from the autograd engine's allocations (the trace marks none)", 4, 100)) + "\n";
        else if (!p.backward_marked)
            o += st.dim("    " + wrap("the trace marks no backward: activations are counted as temporaries (freed in "
                                      "their step) and gradients as other (vramscope run marks them)",
                                      4, 100)) + "\n";
        std::string modules;
        for (size_t k = 0; k < p.modules.size() && k < 4; ++k) {
            const PeakModule& m = p.modules[k];
            modules += std::string(k ? ", " : "") + (m.module.empty() ? "outside any module" : terminal_safe(m.module)) + " " +
                       format_bytes(double(m.bytes));
        }
        if (!modules.empty()) o += "    " + wrap("by module: " + modules, 4, 100) + "\n";
        for (size_t k = 0; k < p.sites.size() && k < 3; ++k) {
            const PeakSite& s = p.sites[k];
            o += "    " + fit(format_bytes(double(s.bytes)), 12) + fit(std::string(name(s.category)), 17) + where(s.site) + "\n";
            if (k == 0) o += stack_block(s.stack, s.stack_shown_from, st, 3);
        }
    }
    return o.empty() ? "" : "\n" + st.bold("Peak") + st.dim(" (allocated memory at its highest, every byte in one category)") + "\n" + o +
                                devices_rest_line(shown, st);
}

}  // namespace

std::string render_summary(const Findings& f, bool color, size_t max_leaks) {
    const Style st{color};
    const ShownDevices devices = shown_devices(f, kSummaryShown.devices);
    std::string o;
    o += st.bold("vramscope") + "  " + terminal_safe(base_name(f.source)) + st.dim("  (" + f.format + ", " + format_count(f.event_count) + " events)") + "\n";
    o += st.dim(wrap("steps: " + format_count(f.step_count) + ", one per " + unit_of(f) + ", from " + std::string(describe(f.steps_source)) +
                         (f.steps_detail.empty() ? "" : " [" + terminal_safe(f.steps_detail) + "]") + "; first " +
                         std::to_string(f.warmup_steps) + " treated as warm-up; window " + std::to_string(f.window) +
                         (f.steps_before_trace ? "; the trace starts after step " + format_count(f.steps_before_trace) +
                                                     " of the run"
                                               : ""),
                     7, 100)) + "\n";
    for (const auto& w : f.warnings) o += st.red("warning: ") + terminal_safe(w) + "\n";
    o += "\n";
    if (!f.input_faults.empty()) {
        o += st.red("CANNOT JUDGE") + "  the input cannot be trusted, so no verdict:\n";
        for (const auto& why : f.input_faults) o += "  " + wrap(terminal_safe(why), 2, 100) + "\n";
    } else if (f.verdict == Verdict::leak && f.leaks.empty()) {
        o += st.red("LEAK") + "  inside each step: memory the step ends give back, held until then\n";
    } else if (f.verdict == Verdict::leak) {
        const SiteFinding& top = f.leaks.front();
        // A long unit (an inferred period's site) wraps the line; the OOM step follows where it fits.
        // Device and host apart: pinned host memory brings no device nearer its OOM.
        const double pinned = f.pinned_leak_bytes_per_step, device = f.leak_bytes_per_step - pinned;
        const std::string rate = pinned <= 0   ? signed_bytes(int64_t(device)) + " per " + unit_of(f)
                                 : device <= 0 ? signed_bytes(int64_t(pinned)) + " of pinned host memory per " + unit_of(f)
                                               : signed_bytes(int64_t(device)) + " on the device and " +
                                                     signed_bytes(int64_t(pinned)) + " pinned on the host per " + unit_of(f);
        const std::string head = wrap("LEAK  " + rate + " since step " + std::to_string(top.first_step), 6, 100);
        const std::string oom = f.projected_oom_step ? "OOM projected at step " + format_count(*f.projected_oom_step)
                                                     : "OOM step unknown (pass --device-memory 80GiB)";
        const size_t last_line = head.size() - (head.rfind('\n') == std::string::npos ? 0 : head.rfind('\n') + 1);
        o += st.red(head) + (last_line + 5 + oom.size() <= 100 ? "  ·  " : "\n      ");
        o += (f.projected_oom_step ? st.red(oom) : st.dim(oom)) + "\n\n";
        o += st.dim("  #  growth/step     site                                    stream            first  conf") + "\n";
        const Shown shown = shown_leaks(f.leaks, max_leaks);
        for (const size_t i : shown.entries) {
            const SiteFinding& l = f.leaks[i];
            char conf[16];
            std::snprintf(conf, sizeof conf, "%.2f", l.confidence);
            o += "  " + fit(std::to_string(i + 1), 3) + fit(per_step(l.bytes_per_step), 16) + fit(where(l.site), 40) +
                 fit(l.memory == Memory::pinned ? "host" : stream_label(l.stream), 18) + fit(std::to_string(l.first_step), 7) +
                 conf + "\n";
            if (l.memory != Memory::torch) o += "       " + wrap(terminal_safe(memory_words(l)), 7, 100) + "\n";
            if (l.allocated_in)
                o += "       " + wrap("allocated in " + package_of(l.allocated_in->file) + where(*l.allocated_in) +
                                        ", called from your line " + std::to_string(l.site.line),
                                    7, 100) + "\n";
            if (l.evidence == LeakEvidence::replaced_bigger)
                o += "       " + wrap("each step frees its buffer and allocates a bigger one at " + where(l.site) +
                                        ": nothing here outlives its step, yet what it holds grows",
                                    7, 100) + "\n";
            if (l.evidence == LeakEvidence::pool_in_use)
                o += "       " + wrap(terminal_safe("in " + l.library + "'s pool (its own count of the bytes in use): its arrays "
                                                    "grow while the pool takes driver memory in doublings, or took it at once; "
                                                    "the site is where the pool last grew"),
                                    7, 100) + "\n";
            if (l.shape == Shape::slowing)
                o += "       " + wrap("slowing: " + per_step(l.recent_bytes_per_step) + " over the last steps, " +
                                        per_step(l.bytes_per_step) + " over the run; growth that slows is still a leak "
                                        "until it stops",
                                    7, 100) + "\n";
            o += stack_block(l.stack, l.stack_shown_from, st);
        }
        if (shown.rest) o += rest_line(shown.rest, "leak sites", per_step(shown.rest_total), st);
        for (const DeviceSummary& d : f.devices)
            for (const StreamUsage& s : d.streams)
                if (s.stream != 0 && s.leaked_bytes > 0 && devices.shows(d.device))
                    o += "\n  " + wrap("side stream " + hex(s.stream) + stream_origin(f, s.stream) + " on " +
                                           f.device_name(d.device) + " holds " + format_bytes(double(s.leaked_bytes)) +
                                           " of leaked blocks: work on it may never have been synchronized "
                                           "or its tensors released",
                                       2, 100) + "\n";
        for (const DeviceSummary& d : f.devices)
            if (devices.shows(d.device) && f.step_count > 0 && d.timeline.size() >= f.step_count &&
                d.timeline[f.step_count - 1].pending_free > 0)
                o += "\n  " + wrap(format_bytes(double(d.timeline[f.step_count - 1].pending_free)) + " on " +
                                       f.device_name(d.device) + " was freed by the program but still waits on "
                                       "another stream at the last step end (record_stream, or a side stream "
                                       "never synchronized with the one that frees it)",
                                   2, 100) + "\n";
    } else if (f.verdict == Verdict::cannot_judge) {
        o += st.red("CANNOT JUDGE") + "  " + wrap(terminal_safe(f.notes.empty() ? "the input holds nothing to judge" : f.notes.front()), 14, 100) + "\n";
    } else {
        o += st.green("NO LEAK") + "  no site leaks, and the ledger below accounts for the growth at step ends\n";
    }
    o += render_within_step(f, st);
    o += render_ledger(f, devices, st);
    o += render_peak(f, devices, st);
    o += render_usage(f, devices, st);
    if (!f.not_leaks.empty()) {
        o += "\n" + st.bold("Not leaks") + st.dim(" (growth you may see, explained)") + "\n";
        const auto shown = shown_not_leaks(f.not_leaks, kSummaryShown.not_leaks_per_kind);
        for (size_t i = 0; i < f.not_leaks.size(); ++i) {
            const NotLeak& n = f.not_leaks[i];
            if (!shown[size_t(n.kind)].shows(i)) continue;
            // Warm-up names its sites in its text already.
            const std::string at = n.site && n.kind != NotLeakKind::warm_up ? " [" + where(*n.site) + "]" : "";
            o += "  " + fit(std::string(name(n.kind)), 17) + fit(format_bytes(double(n.bytes)), 11) + wrap(terminal_safe(n.why) + at, 30, 100) + "\n";
        }
        for (size_t k = 0; k < kNotLeakKinds; ++k)
            if (shown[k].rest)
                o += rest_line(shown[k].rest, std::string(name(NotLeakKind(k))) + (NotLeakKind(k) == NotLeakKind::bounded_cache ? " sites" : " entries"),
                               format_bytes(shown[k].rest_total), st);
    }
    // A verdict that cannot be given has said its first note as the reason already.
    const size_t first_note = f.verdict == Verdict::cannot_judge && f.input_faults.empty() && !f.notes.empty() ? 1 : 0;
    for (size_t i = first_note; i < f.notes.size(); ++i) o += "\n" + st.bold("note: ") + wrap(terminal_safe(f.notes[i]), 6, 100) + "\n";
    return o;
}

std::string render_live(const LiveFinding& live) {
    const std::string whose = terminal_safe(memory_words(live.memory, live.library, ""));
    const std::string at = (whose.empty() ? "" : whose + " at ") + where(live.site) + " (cuda:" + std::to_string(live.device);
    if (!is_leak(live.shape))
        return "withdrawn: " + at + ") made no new high since step " + format_count(live.since_step) +
               "; it was a cache that filled, not a leak (" + std::string(name(live.shape)) + ")";
    std::string line = "leak: " + per_step(live.bytes_per_step) + (whose.empty() ? " at " : " of ") + at + ", growing since step " +
                       format_count(live.since_step) + (live.shape == Shape::slowing ? ", slowing" : "") + ")";
    if (live.evidence == LeakEvidence::replaced_bigger)
        line += ": each step frees its buffer and allocates a bigger one there";
    if (live.evidence == LeakEvidence::pool_in_use) line += ": in " + terminal_safe(live.library) + "'s pool (its bytes in use)";
    if (live.projected_oom_step) line += "; OOM projected at step " + format_count(*live.projected_oom_step);
    return line;
}

std::string render_live_within_step(const LiveFinding& live, std::string_view unit) {
    const std::string per = terminal_safe(unit);
    std::string line = "leak inside the step: " + signed_bytes(int64_t(live.bytes_per_step)) + " per " + per + " at " +
                       where(live.site) + " (cuda:" + std::to_string(live.device) + ", step " +
                       format_count(live.since_step) + "), held until the step ends";
    if (live.projected_oom_step) line += "; out of memory at " + count_of(*live.projected_oom_step, per) + " a step";
    return line;
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
