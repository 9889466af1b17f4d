#include "findings/json.h"

#include <algorithm>
#include <array>
#include <map>
#include <stdexcept>

#include "common/limits.h"
#include "findings/json_writer.h"
#include "findings/shown.h"

namespace vramscope {
namespace {

constexpr size_t kReportPoints = 1500;  // a chart is ~1,000 pixels wide


void source_line(Json& j, const SourceLine& s) { write_source_line(j, s); }

// [[a, b], ...]: compact for the long lists (blocks, per-stream bytes).
void pairs(Json& j, const char* key, const std::vector<std::pair<uint64_t, uint64_t>>& items) {
    j.key(key);
    j.open('[');
    for (const auto& [a, b] : items) {
        j.open('[');
        j.value(a);
        j.value(b);
        j.close(']');
    }
    j.close(']');
}

// A number that may be absent: null then (a step, a byte count, a device).
template <class Int> void optional_number(Json& j, const char* k, const std::optional<Int>& v) {
    j.key(k);
    if (v) j.value(*v);
    else j.null();
}

// Steps a chart shows: all of them, or the last of each of `max` equal buckets.
std::vector<size_t> sample_steps(size_t first, size_t n, size_t max) {
    std::vector<size_t> out;
    if (first >= n) return out;
    const size_t span = n - first, bucket = span <= max ? 1 : (span + max - 1) / max;
    for (size_t end = first + bucket; end < n + bucket; end += bucket) out.push_back(std::min(end, n) - 1);
    return out;
}

// The first step the report draws: a range's first (--steps A:B), when the run reaches it.
size_t first_shown(const Findings& f, const DeviceSummary& d) {
    return f.first_step_shown < d.timeline.size() ? size_t(f.first_step_shown) : 0;
}

// One column of the report: a value per step drawn.
template <class Value>
void column(Json& j, const char* key, const std::vector<size_t>& at, Value value) {
    j.key(key);
    j.open('[');
    for (size_t k : at) value(k);
    j.close(']');
}

// The report's per-device columns: the chart draws them (peak: the highest in each bucket).
void columns(Json& j, const DeviceSummary& d, const std::vector<size_t>& at, size_t first) {
    j.key("columns");
    j.open('{');
    column(j, "step", at, [&](size_t k) { j.value(uint64_t(k)); });
    column(j, "allocated", at, [&](size_t k) { j.value(d.timeline[k].allocated); });
    column(j, "reserved", at, [&](size_t k) { j.value(d.timeline[k].reserved); });
    size_t from = first;
    column(j, "peak", at, [&](size_t k) {
        uint64_t peak = 0;
        for (size_t i = from; i <= k; ++i) peak = std::max(peak, d.timeline[i].peak_allocated);
        j.value(peak);
        from = k + 1;
    });
    // Memory outside torch's allocator, and NVML's figure (null where a step read none).
    column(j, "external", at, [&](size_t k) { j.value(d.timeline[k].external); });
    column(j, "pinned", at, [&](size_t k) { j.value(d.timeline[k].pinned); });
    column(j, "nvml_used", at, [&](size_t k) {
        if (d.timeline[k].nvml_used) j.value(*d.timeline[k].nvml_used);
        else j.null();
    });
    j.close('}');
}

// Each device's growth and where it went: the parts sum to `growth` exactly.
void ledger_array(Json& j, const std::vector<DeviceLedger>& ledger, const ShownDevices& shown) {
    j.key("ledger");
    j.open('[');
    for (const DeviceLedger& l : ledger) {
        if (!shown.shows(l.device)) continue;
        j.open('{');
        j.field("device", uint64_t(l.device));
        j.field("from_step", l.from_step);
        j.field("to_step", l.to_step);
        j.field("allocated_from", l.allocated_from);
        j.field("allocated_to", l.allocated_to);
        j.field("growth", l.growth);
        j.key("parts");
        j.open('{');
        for (size_t p = 0; p < kLedgerParts; ++p) j.field(std::string(name(LedgerPart(p))).c_str(), l.parts[p]);
        j.close('}');
        j.field("unexplained_allowed", l.unexplained_allowed);
        j.key("unexplained_sites");
        j.open('[');
        for (const LedgerSite& s : l.unexplained_sites) {
            j.open('{');
            j.key("site");
            source_line(j, s.site);
            j.field("bytes", s.bytes);
            j.close('}');
        }
        j.close(']');
        j.close('}');
    }
    j.close(']');
}

// Everything the process holds at the last step end, by device and then the host: NVML's figure
// and its parts (torch_reserved + libraries' bytes + context + page_rounding + unexplained = nvml_used).
void usage_array(Json& j, const std::vector<UsageLedger>& usage, const ShownDevices& shown) {
    j.key("usage");
    j.open('[');
    for (const UsageLedger& u : usage) {
        if (u.device && !shown.shows(*u.device)) continue;
        j.open('{');
        optional_number(j, "device", u.device ? std::optional<uint64_t>(*u.device) : std::nullopt);
        j.field("step", u.step);
        optional_number(j, "nvml_used", u.nvml_used);
        j.field("torch_reserved", u.torch_reserved);
        j.key("libraries");
        j.open('[');
        for (const LibraryBytes& l : u.libraries) {
            j.open('{');
            j.field("library", l.library);
            j.field("bytes", l.bytes);
            j.field("growth", l.growth);
            if (l.in_use) j.field("in_use", *l.in_use);  // only where the library counted its pool
            if (l.cached) j.field("cached", *l.cached);
            j.close('}');
        }
        j.close(']');
        optional_number(j, "context", u.context);
        optional_number(j, "page_rounding", u.page_rounding);
        optional_number(j, "unexplained", u.unexplained);
        j.close('}');
    }
    j.close(']');
}

void stack_array(Json& j, const std::vector<SourceLine>& stack, size_t shown_from) {
    j.key("stack");
    j.open('[');
    for (const SourceLine& s : stack) source_line(j, s);
    j.close(']');
    j.field("stack_shown_from", uint64_t(shown_from));
}

// Each device at its highest moment: the categories sum to `bytes` exactly (analysis/peak.h).
void peaks_array(Json& j, const std::vector<DevicePeak>& peaks, const ShownDevices& shown) {
    j.key("peak");
    j.open('[');
    for (const DevicePeak& p : peaks) {
        if (!shown.shows(p.device)) continue;
        j.open('{');
        j.field("device", uint64_t(p.device));
        j.field("step", p.step);
        j.field("phase", name(p.phase));
        j.field("microbatch", p.microbatch);
        j.field("bytes", p.bytes);
        j.key("categories");
        j.open('[');
        for (size_t c = 0; c < kPeakCategories; ++c) {
            j.open('{');
            j.field("category", name(PeakCategory(c)));
            j.field("bytes", p.categories[c]);
            j.close('}');
        }
        j.close(']');
        j.field("reserved", p.reserved);
        j.field("cached_free", p.reserved > p.bytes ? p.reserved - p.bytes : uint64_t(0));
        j.field("external", p.external);
        j.field("pinned", p.pinned);
        j.field("backward_marked", p.backward_marked);
        j.field("backward_inferred", p.backward_inferred);
        j.key("sites");
        j.open('[');
        for (const PeakSite& s : p.sites) {
            j.open('{');
            j.key("site");
            source_line(j, s.site);
            j.field("bytes", s.bytes);
            j.field("category", name(s.category));
            stack_array(j, s.stack, s.stack_shown_from);
            j.close('}');
        }
        j.close(']');
        j.field("module", p.module);
        j.key("modules");
        j.open('[');
        for (const PeakModule& m : p.modules) {
            j.open('{');
            j.field("module", m.module);
            j.field("bytes", m.bytes);
            j.field("category", name(m.category));
            j.close('}');
        }
        j.close(']');
        j.close('}');
    }
    j.close(']');
}

void owners_array(Json& j, const std::vector<Owner>& owners, const std::optional<uint64_t>& found_at_step, bool report);

// Leaks inside a step (analysis/within_step.h), largest rate first.
void within_step_array(Json& j, const std::vector<WithinStepLeak>& leaks, const Shown& shown, bool report) {
    j.key("within_step");
    j.open('[');
    for (const size_t i : shown.entries) {
        const WithinStepLeak& l = leaks[i];
        j.open('{');
        j.key("site");
        source_line(j, l.site);
        stack_array(j, l.stack, l.stack_shown_from);
        j.field("device", uint64_t(l.device));
        j.field("memory", name(l.memory));
        j.field("unit", l.unit);
        j.bytes_field("bytes_per_unit", l.bytes_per_unit);
        j.field("fit_r2", l.fit_r2);
        j.field("units_per_step", l.units_per_step);
        j.field("step", l.step);
        j.field("steps_seen", l.steps_seen);
        j.field("bytes_added", l.bytes_added);
        optional_number(j, "oom_units", l.oom_units);
        owners_array(j, l.owners, l.owners_found_at_step, report);
        j.close('}');
    }
    j.close(']');
}

// Who held a leak: written only when its process found someone, so findings without owners (every
// trace analysed on its own) stay as they were. The report adds each owner's line, as people read it.
void owners_array(Json& j, const std::vector<Owner>& owners, const std::optional<uint64_t>& found_at_step, bool report) {
    if (owners.empty()) return;
    j.key("owners");
    j.open('[');
    for (const Owner& o : owners) {
        j.open('{');
        j.field("path", o.path);
        j.field("root", o.root);
        j.key("edges");
        j.open('[');
        for (const std::string& e : o.edges) j.value(e);
        j.close(']');
        j.field("target", o.target);
        j.field("kind", o.kind);
        if (report) j.field("line", owner_line(o));
        j.close('}');
    }
    j.close(']');
    if (found_at_step) j.field("owners_found_at_step", *found_at_step);
}

// Every step of every device, the unfinished tail marked: the findings file's, not the report's.
// 256 devices over many steps write gigabytes: the text, growing, and the timelines it is written
// from are held to `max_held_bytes`.
void timeline(Json& j, const Findings& f, uint64_t max_held_bytes) {
    uint64_t timelines = 0;
    for (const DeviceSummary& d : f.devices) timelines += kGrowthCharge * d.timeline.size() * sizeof(StepPoint);
    j.key("timeline");
    j.open('[');
    for (const DeviceSummary& d : f.devices)
        for (size_t k = 0; k < d.timeline.size(); ++k) {
            if (k % 1024 == 0 && timelines + kGrowthCharge * j.out.size() > max_held_bytes)
                throw std::runtime_error(f.source + ": its findings JSON, " + std::to_string(f.devices.size()) + " devices over " +
                                         std::to_string(d.timeline.size()) + " steps, would hold more than " +
                                         std::to_string(max_held_bytes >> 20) + " MiB (the limit; --max-memory raises it)");
            const StepPoint& p = d.timeline[k];
            j.open('{');
            j.field("step", uint64_t(k));
            j.field("device", uint64_t(d.device));
            j.field("allocated", p.allocated);
            j.field("reserved", p.reserved);
            j.field("peak_allocated", p.peak_allocated);
            j.field("pending_free", p.pending_free);
            pairs(j, "by_stream", p.by_stream);
            j.field("external", p.external);
            j.field("pinned", p.pinned);
            optional_number(j, "nvml_used", p.nvml_used);
            j.field("complete", uint64_t(k < f.step_count));
            j.close('}');
        }
    j.close(']');
}

// The leak sites, largest first. sampled: the report's steps by device (its stacked areas draw
// what each site held at them); null for the findings file, which keeps the live blocks instead.
void leaks_array(Json& j, const std::vector<SiteFinding>& leaks, const Shown& shown,
                 const std::map<uint16_t, std::vector<size_t>>* sampled) {
    j.key("leaks");
    j.open('[');
    for (const size_t i : shown.entries) {
        const SiteFinding& l = leaks[i];
        j.open('{');
        j.bytes_field("bytes_per_step", l.bytes_per_step);
        j.key("site");
        source_line(j, l.site);
        j.field("memory", name(l.memory));
        j.field("library", l.library);
        if (sampled && l.memory != Memory::torch) j.field("memory_words", memory_words(l));  // the report's
        stack_array(j, l.stack, l.stack_shown_from);
        j.key("allocated_in");
        if (l.allocated_in) source_line(j, *l.allocated_in);
        else j.null();
        j.field("shape", name(l.shape));
        j.field("evidence", name(l.evidence));
        j.bytes_field("recent_bytes_per_step", l.recent_bytes_per_step);
        j.field("device", uint64_t(l.device));
        j.field("stream", l.stream);
        j.field("stream_kind", stream_kind(l.stream));
        j.field("first_step", l.first_step);
        j.field("confidence", l.confidence);
        j.field("fit_r2", l.fit_r2);
        j.field("recurrence", l.recurrence);
        j.field("share_of_growth", l.share_of_growth);
        j.field("live_bytes", l.live_bytes);
        j.field("peak_bytes", l.peak_bytes);
        j.field("surviving_allocations", l.surviving_allocations);
        if (sampled && !l.held.empty()) {  // none in findings read back from JSON: no area drawn
            j.key("held");
            j.open('[');
            for (size_t k : sampled->at(l.device)) j.value(k < l.held.size() ? l.held[k] : uint64_t(0));
            j.close(']');
        } else if (!sampled) {
            pairs(j, "live_blocks", l.live_blocks);
        }
        owners_array(j, l.owners, l.owners_found_at_step, sampled != nullptr);
        j.close('}');
    }
    j.close(']');
}

// What the report leaves out (findings/shown.h), counted, for its lines "and 1,997 more ...".
void not_shown_object(Json& j, const Shown& leaks, const Shown& within_step, const std::array<Shown, kNotLeakKinds>& not_leaks,
                      const ShownDevices& devices) {
    j.key("not_shown");
    j.open('{');
    j.key("leaks");
    j.open('{');
    j.field("count", uint64_t(leaks.rest));
    j.bytes_field("bytes_per_step", leaks.rest_total);
    j.close('}');
    j.key("within_step");
    j.open('{');
    j.field("count", uint64_t(within_step.rest));
    j.bytes_field("bytes_per_unit", within_step.rest_total);
    j.close('}');
    j.key("not_leaks");
    j.open('[');
    for (size_t k = 0; k < kNotLeakKinds; ++k) {
        if (!not_leaks[k].rest) continue;
        j.open('{');
        j.field("kind", name(NotLeakKind(k)));
        j.field("count", uint64_t(not_leaks[k].rest));
        j.field("bytes", uint64_t(not_leaks[k].rest_total));
        j.close('}');
    }
    j.close(']');
    j.field("devices", uint64_t(devices.rest));
    j.close('}');
}

// report: the HTML report's data, column-oriented and at most kReportPoints steps a series, of
// the entries kReportShown picks; the findings file has every entry.
void findings_object(Json& j, const Findings& f, bool report = false, uint64_t max_held_bytes = UINT64_MAX) {
    constexpr ShownCaps kEvery{SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX};
    const ShownCaps& caps = report ? kReportShown : kEvery;
    const ShownDevices devices = shown_devices(f, caps.devices);
    const Shown leaks = shown_leaks(f.leaks, caps.leaks), within_step = shown_within_step(f.within_step, caps.within_step);
    const auto not_leaks = shown_not_leaks(f.not_leaks, caps.not_leaks_per_kind);
    std::map<uint16_t, std::vector<size_t>> sampled;
    if (report)
        for (const DeviceSummary& d : f.devices)  // full steps only: the unfinished tail would dip
            sampled[d.device] = sample_steps(first_shown(f, d), f.step_count ? std::min<size_t>(f.step_count, d.timeline.size())
                                                                               : d.timeline.size(), kReportPoints);
    j.open('{');
    j.field("schema", "vramscope.findings");
    j.field("schema_version", uint64_t(kSchemaVersion));
    j.field("source", f.source);
    j.field("format", f.format);
    j.field("verdict", name(f.verdict));
    j.bytes_field("leak_bytes_per_step", f.leak_bytes_per_step);
    j.bytes_field("pinned_leak_bytes_per_step", f.pinned_leak_bytes_per_step);
    j.field("events", f.event_count);
    j.key("steps");
    j.open('{');
    j.field("count", f.step_count);
    j.field("source", name(f.steps_source));
    j.field("detail", f.steps_detail);
    j.field("unit", f.step_unit);
    j.field("warmup", f.warmup_steps);
    j.field("before_trace", f.steps_before_trace);
    j.field("window", uint64_t(f.window));
    j.close('}');
    optional_number(j, "projected_oom_step", f.projected_oom_step);
    if (!report) timeline(j, f, max_held_bytes);
    j.key("devices");
    j.open('[');
    for (const DeviceSummary& d : f.devices) {
        if (!devices.shows(d.device)) continue;
        j.open('{');
        j.field("device", uint64_t(d.device));
        j.key("total_memory");
        if (d.total_memory) j.value(d.total_memory);
        else j.null();
        j.key("capacity_source");
        if (d.total_memory) j.value(d.capacity_source);
        else j.null();
        optional_number(j, "projected_oom_step", d.projected_oom_step);
        optional_number(j, "oom_step", d.oom_step);
        j.key("oom");
        if (d.oom) {
            j.open('{');
            j.field("step", d.oom->step);
            j.field("asked", d.oom->asked);
            j.field("device_free", d.oom->device_free);
            j.field("cached_free", d.oom->cached_free);
            j.field("largest_free_block", d.oom->largest_free_block);
            j.field("fragmentation", d.oom->fragmentation());
            j.close('}');
        } else {
            j.null();
        }
        if (report) columns(j, d, sampled[d.device], first_shown(f, d));
        j.key("streams");
        j.open('[');
        for (const StreamUsage& s : d.streams) {
            j.open('{');
            j.field("stream", s.stream);
            j.field("kind", stream_kind(s.stream));
            j.field("allocated_at_end", s.allocated_at_end);
            j.field("leaked_bytes", s.leaked_bytes);
            j.close('}');
        }
        j.close(']');
        j.close('}');
    }
    j.close(']');
    leaks_array(j, f.leaks, leaks, report ? &sampled : nullptr);
    within_step_array(j, f.within_step, within_step, report);
    peaks_array(j, f.peaks, devices);
    j.key("not_leaks");
    j.open('[');
    for (size_t i = 0; i < f.not_leaks.size(); ++i) {
        const NotLeak& n = f.not_leaks[i];
        if (!not_leaks[size_t(n.kind)].shows(i)) continue;
        j.open('{');
        j.field("kind", name(n.kind));
        j.field("bytes", n.bytes);
        j.field("why", n.why);
        j.field("device", uint64_t(n.device));
        j.key("site");
        if (n.site) source_line(j, *n.site);
        else j.null();
        j.close('}');
    }
    j.close(']');
    ledger_array(j, f.ledger, devices);
    usage_array(j, f.usage, devices);
    if (report) not_shown_object(j, leaks, within_step, not_leaks, devices);
    j.key("notes");
    j.open('[');
    for (const auto& n : f.notes) j.value(n);
    j.close(']');
    j.key("warnings");
    j.open('[');
    for (const auto& n : f.warnings) j.value(n);
    j.close(']');
    j.key("input_faults");
    j.open('[');
    for (const auto& n : f.input_faults) j.value(n);
    j.close(']');
    j.key("meta");
    j.open('{');
    for (const auto& [k, v] : f.meta) j.field(k.c_str(), v);
    j.close('}');
    j.field("import_seconds", f.import_seconds);
    j.field("analysis_seconds", f.analysis_seconds);
    j.close('}');
}


void ranks_object(Json& j, const RankComparison& ranks) {
    if (ranks.rows.empty()) return;
    j.key("ranks");
    j.open('{');
    j.key("rows");
    j.open('[');
    for (const RankRow& r : ranks.rows) {
        j.open('{');
        j.field("rank", uint64_t(r.rank));
        j.field("run", uint64_t(r.run));
        j.bytes_field("leak_bytes_per_step", r.leak_bytes_per_step);
        j.field("allocated", r.allocated);
        j.field("peak_allocated", r.peak_allocated);
        j.close('}');
    }
    j.close(']');
    j.key("skew");
    j.open('[');
    for (const std::string& s : ranks.skew) j.value(s);
    j.close(']');
    j.close('}');
}

}  // namespace

const char* stream_kind(uint64_t stream) { return stream == 0 ? "default" : "side"; }

std::string memory_words(Memory memory, const std::string& library, const std::string& call) {
    switch (memory) {
    case Memory::torch: return "";
    case Memory::external:
        return "device memory from " + (library.empty() ? "a library" : library) + " (" + (call.empty() ? "" : call + ", ") +
               "outside torch's allocator)";
    case Memory::pinned:
        if (library == "torch") return "pinned host memory (torch's host allocator)";
        return "pinned host memory" + (library.empty() ? "" : " from " + library) + (call.empty() ? "" : " (" + call + ")");
    }
    return "";
}

std::string memory_words(const SiteFinding& l) {
    return memory_words(l.memory, l.library, l.stack.empty() ? "" : l.stack.front().function);
}

std::string owner_line(const Owner& o) {
    return o.path + "  → " + o.target + (o.kind == "reachable" ? "" : "   (" + o.kind + ")");
}

std::string to_json(const Findings& f, uint64_t max_held_bytes) {
    Json j;
    findings_object(j, f, false, max_held_bytes);
    j.out.push_back('\n');
    return j.out;
}

std::string to_json(const std::vector<Findings>& runs, const RankComparison& ranks, uint64_t max_held_bytes) {
    if (runs.size() == 1) return to_json(runs.front(), max_held_bytes);
    Json j;
    j.open('{');
    j.field("schema", "vramscope.findings");
    j.field("schema_version", uint64_t(kSchemaVersion));
    Verdict verdict = Verdict::no_leak;
    for (const Findings& f : runs) verdict = worse(verdict, f.verdict);
    j.field("verdict", name(verdict));
    j.key("runs");
    j.open('[');
    for (const Findings& f : runs) findings_object(j, f, false, max_held_bytes);
    j.close(']');
    ranks_object(j, ranks);
    j.close('}');
    j.out.push_back('\n');
    return j.out;
}

std::string to_report_json(const std::vector<Findings>& runs, const RankComparison& ranks) {
    Json j;
    j.open('{');
    j.field("generator", "vramscope " VRAMSCOPE_VERSION);
    j.key("runs");
    j.open('[');
    for (const Findings& f : runs) findings_object(j, f, true);
    j.close(']');
    ranks_object(j, ranks);
    j.close('}');
    return j.out;
}

}  // namespace vramscope
