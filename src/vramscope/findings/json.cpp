#include "findings/json.h"

#include <cmath>
#include <cstdio>

namespace vramscope {
namespace {

class Json {
public:
    std::string out;

    void open(char c) {
        comma();
        out.push_back(c);
        first_ = true;
    }
    void close(char c) {
        out.push_back(c);
        first_ = false;
    }
    void key(const char* k) {
        comma();
        str(k);
        out.push_back(':');
        first_ = true;  // the value follows without a comma
    }
    void value(const std::string& s) {
        comma();
        str(s);
    }
    void value(const char* s) { value(std::string(s)); }
    void value(uint64_t v) {
        comma();
        out += std::to_string(v);
    }
    void value(double v) {
        comma();
        if (!std::isfinite(v)) {
            out += "null";
            return;
        }
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.6g", v);
        out += buf;
    }
    void null() {
        comma();
        out += "null";
    }
    template <class T> void field(const char* k, const T& v) {
        key(k);
        value(v);
    }

private:
    void comma() {
        if (!first_) out.push_back(',');
        first_ = false;
    }
    void str(const std::string& s) {
        out.push_back('"');
        for (unsigned char c : s) {
            switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            case '\r': out += "\\r"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out.push_back(char(c));
                }
            }
        }
        out.push_back('"');
    }
    bool first_ = true;
};

void source_line(Json& j, const SourceLine& s) {
    j.open('{');
    j.field("file", s.file);
    j.field("line", uint64_t(s.line));
    j.field("function", s.function);
    j.close('}');
}

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

void optional_step(Json& j, const char* k, const std::optional<uint64_t>& v) {
    j.key(k);
    if (v) j.value(*v);
    else j.null();
}

void findings_object(Json& j, const Findings& f) {
    j.open('{');
    j.field("schema", "vramscope.findings");
    j.field("schema_version", uint64_t(kSchemaVersion));
    j.field("source", f.source);
    j.field("format", f.format);
    j.field("verdict", f.verdict);
    j.field("leak_bytes_per_step", f.leak_bytes_per_step);
    j.field("events", f.event_count);
    j.key("steps");
    j.open('{');
    j.field("count", f.step_count);
    j.field("source", f.steps_source);
    j.field("detail", f.steps_detail);
    j.field("warmup", f.warmup_steps);
    j.field("window", uint64_t(f.window));
    j.close('}');
    optional_step(j, "projected_oom_step", f.projected_oom_step);
    j.key("timeline");
    j.open('[');
    for (const DeviceSummary& d : f.devices)
        for (size_t k = 0; k < d.timeline.size(); ++k) {
            const StepPoint& p = d.timeline[k];
            j.open('{');
            j.field("step", uint64_t(k));
            j.field("device", uint64_t(d.device));
            j.field("allocated", p.allocated);
            j.field("reserved", p.reserved);
            j.field("peak_allocated", p.peak_allocated);
            j.field("pending_free", p.pending_free);
            pairs(j, "by_stream", p.by_stream);
            j.field("complete", uint64_t(k < f.step_count));
            j.close('}');
        }
    j.close(']');
    j.key("devices");
    j.open('[');
    for (const DeviceSummary& d : f.devices) {
        j.open('{');
        j.field("device", uint64_t(d.device));
        j.key("total_memory");
        if (d.total_memory) j.value(d.total_memory);
        else j.null();
        j.key("capacity_source");
        if (d.total_memory) j.value(d.capacity_source);
        else j.null();
        optional_step(j, "projected_oom_step", d.projected_oom_step);
        optional_step(j, "oom_step", d.oom_step);
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
    j.key("leaks");
    j.open('[');
    for (const SiteFinding& l : f.leaks) {
        j.open('{');
        j.field("bytes_per_step", l.bytes_per_step);
        j.key("site");
        source_line(j, l.site);
        j.key("stack");
        j.open('[');
        for (const SourceLine& s : l.stack) source_line(j, s);
        j.close(']');
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
        pairs(j, "live_blocks", l.live_blocks);
        j.close('}');
    }
    j.close(']');
    j.key("not_leaks");
    j.open('[');
    for (const NotLeak& n : f.not_leaks) {
        j.open('{');
        j.field("kind", n.kind);
        j.field("bytes", n.bytes);
        j.field("why", n.why);
        j.field("device", uint64_t(n.device));
        j.key("site");
        if (n.site) source_line(j, *n.site);
        else j.null();
        j.close('}');
    }
    j.close(']');
    j.key("notes");
    j.open('[');
    for (const auto& n : f.notes) j.value(n);
    j.close(']');
    j.key("warnings");
    j.open('[');
    for (const auto& n : f.warnings) j.value(n);
    j.close(']');
    j.key("meta");
    j.open('{');
    for (const auto& [k, v] : f.meta) j.field(k.c_str(), v);
    j.close('}');
    j.field("import_seconds", f.import_seconds);
    j.field("analysis_seconds", f.analysis_seconds);
    j.close('}');
}

}  // namespace

const char* stream_kind(uint64_t stream) { return stream == 0 ? "default" : "side"; }

std::string to_json(const Findings& f) {
    Json j;
    findings_object(j, f);
    j.out.push_back('\n');
    return j.out;
}

std::string to_json(const std::vector<Findings>& runs, const RankComparison& ranks) {
    if (runs.size() == 1) return to_json(runs.front());
    Json j;
    j.open('{');
    j.field("schema", "vramscope.findings");
    j.field("schema_version", uint64_t(kSchemaVersion));
    bool leak = false;
    for (const Findings& f : runs) leak = leak || f.verdict == "leak";
    j.field("verdict", leak ? "leak" : "no-leak");
    j.key("runs");
    j.open('[');
    for (const Findings& f : runs) findings_object(j, f);
    j.close(']');
    if (!ranks.rows.empty()) {
        j.key("ranks");
        j.open('{');
        j.key("rows");
        j.open('[');
        for (const RankRow& r : ranks.rows) {
            j.open('{');
            j.field("rank", uint64_t(r.rank));
            j.field("run", uint64_t(r.run));
            j.field("leak_bytes_per_step", r.leak_bytes_per_step);
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
    j.close('}');
    j.out.push_back('\n');
    return j.out;
}

}  // namespace vramscope
