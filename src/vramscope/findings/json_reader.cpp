#include "findings/json_reader.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "common/format.h"
#include "findings/json.h"

namespace vramscope {
namespace {

class JsonParser {
public:
    JsonParser(std::string_view text, const std::string& name, unsigned keep_depth, unsigned max_depth,
               uint64_t max_held_bytes)
        : s_(text), name_(name), keep_depth_(keep_depth), max_depth_(max_depth), max_held_bytes_(max_held_bytes) {}

    JsonValue document() {
        JsonValue v = value(0);
        space();
        if (i_ != s_.size()) fail("data after the JSON value");
        return v;
    }

private:
    [[noreturn]] void fail(const std::string& why) const {
        throw std::runtime_error(name_ + ": offset " + std::to_string(i_) + ": " + why);
    }
    void space() {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
    }
    void expect(char c) {
        space();
        if (i_ >= s_.size() || s_[i_] != c) fail(std::string("expected '") + c + "'");
        ++i_;
    }
    bool literal(const char* word) {
        const size_t n = std::strlen(word);
        if (s_.substr(i_, n) != word) return false;
        i_ += n;
        return true;
    }

    JsonValue value(unsigned depth) {
        if (depth > max_depth_) fail("nested deeper than " + std::to_string(max_depth_) + " levels");
        space();
        if (i_ >= s_.size()) fail("JSON cut short");
        const size_t begin = i_;
        JsonValue v;
        const char c = s_[i_];
        if (c == '{' || c == '[') {
            const bool object = c == '{';
            v.type = object ? JsonValue::Type::object : JsonValue::Type::array;
            ++i_;
            space();
            if (i_ < s_.size() && s_[i_] == (object ? '}' : ']')) {
                ++i_;
            } else {
                while (true) {
                    if (object) {
                        space();
                        if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string key");
                        std::string key = string_value();
                        if (depth < keep_depth_) hold(key.size()), v.keys.push_back(std::move(key));
                        expect(':');
                    }
                    JsonValue item = value(depth + 1);
                    if (depth < keep_depth_) hold(sizeof(JsonValue) + item.str.size()), v.items.push_back(std::move(item));
                    space();
                    if (i_ < s_.size() && s_[i_] == ',') {
                        ++i_;
                        continue;
                    }
                    expect(object ? '}' : ']');
                    break;
                }
            }
        } else if (c == '"') {
            v.type = JsonValue::Type::string;
            v.str = string_value();
        } else if (literal("null")) {
            v.type = JsonValue::Type::null;
        } else if (literal("true") || literal("false")) {
            v.type = JsonValue::Type::boolean;
        } else {
            v.type = JsonValue::Type::number;
            number();
        }
        v.text = s_.substr(begin, i_ - begin);
        return v;
    }

    void digits() {
        const size_t from = i_;
        while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
        if (i_ == from) fail("bad number");
    }
    void number() {
        if (i_ < s_.size() && s_[i_] == '-') ++i_;
        if (i_ < s_.size() && s_[i_] == '0') ++i_;
        else digits();
        if (i_ < s_.size() && s_[i_] == '.') ++i_, digits();
        if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
            ++i_;
            if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
            digits();
        }
    }

    // At the opening quote; UTF-8 as written, escapes decoded (a lone surrogate stays U+FFFD).
    std::string string_value() {
        ++i_;
        std::string out;
        while (true) {
            if (i_ >= s_.size()) fail("string cut short");
            const char c = s_[i_++];
            if (c == '"') return out;
            if (uint8_t(c) < 0x20) fail("control character inside a string");
            if (c != '\\') {
                out.push_back(c);
                continue;
            }
            if (i_ >= s_.size()) fail("string cut short");
            const char e = s_[i_++];
            switch (e) {
            case '"': case '\\': case '/': out.push_back(e); break;
            case 'b': out.push_back('\b'); break;
            case 'f': out.push_back('\f'); break;
            case 'n': out.push_back('\n'); break;
            case 'r': out.push_back('\r'); break;
            case 't': out.push_back('\t'); break;
            case 'u': utf8(out, hex4()); break;
            default: fail("bad escape in a string");
            }
        }
    }
    uint32_t hex4() {
        if (s_.size() - i_ < 4) fail("string cut short");
        uint32_t v = 0;
        for (int k = 0; k < 4; ++k) {
            const char h = s_[i_++];
            v <<= 4;
            if (h >= '0' && h <= '9') v |= uint32_t(h - '0');
            else if (h >= 'a' && h <= 'f') v |= uint32_t(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') v |= uint32_t(h - 'A' + 10);
            else fail("bad \\u escape");
        }
        return v;
    }
    static void utf8(std::string& out, uint32_t cp) {
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;  // names are compared, not reassembled
        if (cp < 0x80) {
            out.push_back(char(cp));
        } else if (cp < 0x800) {
            out.push_back(char(0xC0 | cp >> 6));
            out.push_back(char(0x80 | (cp & 0x3F)));
        } else {
            out.push_back(char(0xE0 | cp >> 12));
            out.push_back(char(0x80 | (cp >> 6 & 0x3F)));
            out.push_back(char(0x80 | (cp & 0x3F)));
        }
    }

    std::string_view s_;
    const std::string& name_;
    unsigned keep_depth_, max_depth_;
    uint64_t max_held_bytes_, held_ = 0;
    void hold(uint64_t bytes) {
        if ((held_ += bytes) > max_held_bytes_)
            fail("holds more than " + format_bytes(double(max_held_bytes_)) + " read (--max-memory bounds what reading holds)");
    }
    size_t i_ = 0;
};

const char* type_name(JsonValue::Type t) {
    static constexpr const char* kNames[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    return kNames[int(t)];
}

}  // namespace

const JsonValue* JsonValue::get(std::string_view key) const {
    for (size_t k = 0; k < keys.size(); ++k)
        if (keys[k] == key) return &items[k];
    return nullptr;
}

JsonValue parse_json(std::string_view text, const std::string& name, unsigned keep_depth, unsigned max_depth,
                     uint64_t max_held_bytes) {
    return JsonParser(text, name, keep_depth, max_depth, max_held_bytes).document();
}

namespace {

using T = JsonValue::Type;

// One findings file being read: every error names it and the field.
class FindingsReader {
public:
    explicit FindingsReader(const std::string& name) : name_(name) {}

    [[noreturn]] void refuse(const std::string& why) const {
        throw std::runtime_error(name_ + ": not a findings JSON (vramscope analyze --json): " + why);
    }
    [[noreturn]] void bad(std::string_view field, const JsonValue& v, const std::string& what) const {
        throw std::runtime_error(name_ + ": " + std::string(field) + ": " + std::string(v.text.substr(0, 40)) +
                                 " is not " + what);
    }

    const JsonValue* member(const JsonValue& object, std::string_view key, T type, std::string_view field) const {
        const JsonValue* v = object.get(key);
        if (v && v->type != type && v->type != T::null) bad(field, *v, std::string(type_name(type)));
        return v && v->type == type ? v : nullptr;
    }
    const std::vector<JsonValue>& array(const JsonValue& o, std::string_view key) const {
        static const std::vector<JsonValue> none;
        const JsonValue* v = member(o, key, T::array, key);
        return v ? v->items : none;
    }
    // Each item of an array of objects.
    template <class F> void objects(const JsonValue& o, std::string_view key, F&& each) const {
        for (const JsonValue& item : array(o, key)) {
            if (item.type != T::object) bad(key, item, "an object");
            each(item);
        }
    }
    void text(const JsonValue& o, std::string_view key, std::string& out) const {
        if (const JsonValue* v = member(o, key, T::string, key)) out = v->str;
    }
    void texts(const JsonValue& o, std::string_view key, std::vector<std::string>& out) const {
        for (const JsonValue& item : array(o, key)) {
            if (item.type != T::string) bad(key, item, "a string");
            out.push_back(item.str);
        }
    }

    // Whole numbers as written (a double would round the large ones); null: left as it is.
    template <class Int> void whole(const JsonValue& o, std::string_view key, Int& out) const {
        if (const JsonValue* v = member(o, key, T::number, key)) whole_value(*v, key, out);
    }
    template <class Int> void whole_value(const JsonValue& v, std::string_view field, Int& out) const {
        if (v.type != T::number) bad(field, v, "a whole number");
        const std::string digits(v.text);
        char* end = nullptr;
        errno = 0;
        const bool negative = digits[0] == '-';
        const long long s = negative ? std::strtoll(digits.c_str(), &end, 10) : 0;
        const unsigned long long u = negative ? 0 : std::strtoull(digits.c_str(), &end, 10);
        const bool fits = negative ? std::is_signed_v<Int> && s >= (long long)std::numeric_limits<Int>::min()
                                   : u <= (unsigned long long)std::numeric_limits<Int>::max();
        if (*end || errno || !fits) bad(field, v, "a whole number that fits");
        out = negative ? Int(s) : Int(u);
    }
    void optional_whole(const JsonValue& o, std::string_view key, std::optional<uint64_t>& out) const {
        if (!member(o, key, T::number, key)) return;
        uint64_t v = 0;
        whole(o, key, v);
        out = v;
    }
    // A rate or a share; null (what the writer makes of a value that is not finite) reads back as NaN.
    void real(const JsonValue& o, std::string_view key, double& out) const {
        const JsonValue* v = o.get(key);
        if (!v) return;
        if (v->type == T::null) out = std::numeric_limits<double>::quiet_NaN();
        else if (v->type != T::number || !std::isfinite(out = std::strtod(std::string(v->text).c_str(), nullptr)))
            bad(key, *v, "a number");
    }
    template <class Enum> void word(const JsonValue& o, std::string_view key, Enum& out, Enum last) const {
        const JsonValue* v = member(o, key, T::string, key);
        if (!v) return;
        for (int k = 0; k <= int(last); ++k)
            if (name(Enum(k)) == v->str) return void(out = Enum(k));
        bad(key, *v, "one of its vocabulary (docs/findings.md)");
    }
    void flag(const JsonValue& o, std::string_view key, bool& out) const {
        if (const JsonValue* v = member(o, key, T::boolean, key)) out = v->text == "true";
    }
    void stack(const JsonValue& o, std::vector<SourceLine>& out, size_t& shown_from) const {
        objects(o, "stack", [&](const JsonValue& s) { source_line(s, out.emplace_back()); });
        whole(o, "stack_shown_from", shown_from);
    }
    void source_line(const JsonValue& o, SourceLine& out) const {
        text(o, "file", out.file);
        whole(o, "line", out.line);
        text(o, "function", out.function);
    }
    void pairs(const JsonValue& o, std::string_view key, std::vector<std::pair<uint64_t, uint64_t>>& out) const {
        for (const JsonValue& p : array(o, key)) {
            if (p.type != T::array || p.items.size() != 2) bad(key, p, "a pair [a, b]");
            auto& [a, b] = out.emplace_back();
            whole_value(p.items[0], key, a);
            whole_value(p.items[1], key, b);
        }
    }

    void run(const JsonValue& o, Findings& f) const;
    void leak(const JsonValue& o, SiteFinding& l) const;
    void owners(const JsonValue& o, std::vector<Owner>& out, std::optional<uint64_t>& found_at_step) const;
    void peak(const JsonValue& o, DevicePeak& p) const;
    void within_step(const JsonValue& o, WithinStepLeak& l) const;
    void devices(const JsonValue& o, Findings& f) const;
    void ledger(const JsonValue& o, DeviceLedger& l) const;
    void usage(const JsonValue& o, UsageLedger& u) const;
    void ranks(const JsonValue& o, RankComparison& r) const;

private:
    const std::string& name_;
};

void FindingsReader::leak(const JsonValue& o, SiteFinding& l) const {
    real(o, "bytes_per_step", l.bytes_per_step);
    if (const JsonValue* s = member(o, "site", T::object, "leaks.site")) source_line(*s, l.site);
    word(o, "memory", l.memory, Memory::pinned);
    text(o, "library", l.library);
    stack(o, l.stack, l.stack_shown_from);
    if (const JsonValue* in = member(o, "allocated_in", T::object, "leaks.allocated_in")) source_line(*in, l.allocated_in.emplace());
    word(o, "shape", l.shape, Shape::too_short);
    word(o, "evidence", l.evidence, LeakEvidence::pool_in_use);
    real(o, "recent_bytes_per_step", l.recent_bytes_per_step);
    whole(o, "device", l.device);
    whole(o, "stream", l.stream);
    whole(o, "first_step", l.first_step);
    real(o, "confidence", l.confidence);
    real(o, "fit_r2", l.fit_r2);
    real(o, "recurrence", l.recurrence);
    real(o, "share_of_growth", l.share_of_growth);
    whole(o, "live_bytes", l.live_bytes);
    whole(o, "peak_bytes", l.peak_bytes);
    whole(o, "surviving_allocations", l.surviving_allocations);
    pairs(o, "live_blocks", l.live_blocks);
    owners(o, l.owners, l.owners_found_at_step);
}

void FindingsReader::owners(const JsonValue& o, std::vector<Owner>& out, std::optional<uint64_t>& found_at_step) const {
    objects(o, "owners", [&](const JsonValue& w) {
        Owner& owner = out.emplace_back();
        text(w, "path", owner.path);
        text(w, "root", owner.root);
        texts(w, "edges", owner.edges);
        text(w, "target", owner.target);
        text(w, "kind", owner.kind);
    });
    optional_whole(o, "owners_found_at_step", found_at_step);
}

// Devices first, then the timeline's points into them: each device's steps in order.
void FindingsReader::devices(const JsonValue& o, Findings& f) const {
    objects(o, "devices", [&](const JsonValue& d) {
        DeviceSummary& device = f.devices.emplace_back();
        whole(d, "device", device.device);
        whole(d, "total_memory", device.total_memory);
        text(d, "capacity_source", device.capacity_source);
        optional_whole(d, "projected_oom_step", device.projected_oom_step);
        optional_whole(d, "oom_step", device.oom_step);
        if (const JsonValue* oom = member(d, "oom", T::object, "devices.oom")) {
            OomRequest& r = device.oom.emplace();
            whole(*oom, "step", r.step);
            whole(*oom, "asked", r.asked);
            whole(*oom, "device_free", r.device_free);
            whole(*oom, "cached_free", r.cached_free);
            whole(*oom, "largest_free_block", r.largest_free_block);
        }
        objects(d, "streams", [&](const JsonValue& s) {
            StreamUsage& stream = device.streams.emplace_back();
            whole(s, "stream", stream.stream);
            whole(s, "allocated_at_end", stream.allocated_at_end);
            whole(s, "leaked_bytes", stream.leaked_bytes);
        });
    });
    objects(o, "timeline", [&](const JsonValue& p) {
        uint16_t device = 0;
        uint64_t step = 0;
        whole(p, "device", device);
        whole(p, "step", step);
        auto d = std::find_if(f.devices.begin(), f.devices.end(), [&](const DeviceSummary& s) { return s.device == device; });
        if (d == f.devices.end() || step != d->timeline.size()) bad("timeline", p, "the next step of a listed device");
        StepPoint& point = d->timeline.emplace_back();
        whole(p, "allocated", point.allocated);
        whole(p, "reserved", point.reserved);
        whole(p, "peak_allocated", point.peak_allocated);
        whole(p, "pending_free", point.pending_free);
        pairs(p, "by_stream", point.by_stream);
        whole(p, "external", point.external);
        whole(p, "pinned", point.pinned);
        optional_whole(p, "nvml_used", point.nvml_used);
    });
}

void FindingsReader::usage(const JsonValue& o, UsageLedger& u) const {
    if (member(o, "device", T::number, "usage.device")) whole(o, "device", u.device.emplace());
    whole(o, "step", u.step);
    optional_whole(o, "nvml_used", u.nvml_used);
    whole(o, "torch_reserved", u.torch_reserved);
    objects(o, "libraries", [&](const JsonValue& l) {
        LibraryBytes& library = u.libraries.emplace_back();
        text(l, "library", library.library);
        whole(l, "bytes", library.bytes);
        whole(l, "growth", library.growth);
        optional_whole(l, "in_use", library.in_use);
        optional_whole(l, "cached", library.cached);
    });
    optional_whole(o, "context", u.context);
    if (member(o, "page_rounding", T::number, "usage.page_rounding")) whole(o, "page_rounding", u.page_rounding.emplace());
    if (member(o, "unexplained", T::number, "usage.unexplained")) whole(o, "unexplained", u.unexplained.emplace());
}

void FindingsReader::peak(const JsonValue& o, DevicePeak& p) const {
    whole(o, "device", p.device);
    whole(o, "step", p.step);
    word(o, "phase", p.phase, Phase::optimizer);
    whole(o, "microbatch", p.microbatch);
    whole(o, "bytes", p.bytes);
    objects(o, "categories", [&](const JsonValue& c) {
        PeakCategory category = PeakCategory::other;
        word(c, "category", category, PeakCategory::other);
        whole(c, "bytes", p.categories[size_t(category)]);
    });
    whole(o, "reserved", p.reserved);
    whole(o, "external", p.external);
    whole(o, "pinned", p.pinned);
    flag(o, "backward_marked", p.backward_marked);
    flag(o, "backward_inferred", p.backward_inferred);
    objects(o, "sites", [&](const JsonValue& s) {
        PeakSite& site = p.sites.emplace_back();
        if (const JsonValue* at = member(s, "site", T::object, "peak.sites.site")) source_line(*at, site.site);
        whole(s, "bytes", site.bytes);
        word(s, "category", site.category, PeakCategory::other);
        stack(s, site.stack, site.stack_shown_from);
    });
    text(o, "module", p.module);
    objects(o, "modules", [&](const JsonValue& m) {
        PeakModule& module = p.modules.emplace_back();
        text(m, "module", module.module);
        whole(m, "bytes", module.bytes);
        word(m, "category", module.category, PeakCategory::other);
    });
}

void FindingsReader::within_step(const JsonValue& o, WithinStepLeak& l) const {
    if (const JsonValue* s = member(o, "site", T::object, "within_step.site")) source_line(*s, l.site);
    stack(o, l.stack, l.stack_shown_from);
    whole(o, "device", l.device);
    word(o, "memory", l.memory, Memory::pinned);
    text(o, "unit", l.unit);
    real(o, "bytes_per_unit", l.bytes_per_unit);
    real(o, "fit_r2", l.fit_r2);
    whole(o, "units_per_step", l.units_per_step);
    whole(o, "step", l.step);
    whole(o, "steps_seen", l.steps_seen);
    whole(o, "bytes_added", l.bytes_added);
    optional_whole(o, "oom_units", l.oom_units);
    owners(o, l.owners, l.owners_found_at_step);
}

void FindingsReader::ledger(const JsonValue& o, DeviceLedger& l) const {
    whole(o, "device", l.device);
    whole(o, "from_step", l.from_step);
    whole(o, "to_step", l.to_step);
    whole(o, "allocated_from", l.allocated_from);
    whole(o, "allocated_to", l.allocated_to);
    whole(o, "growth", l.growth);
    if (const JsonValue* parts = member(o, "parts", T::object, "ledger.parts"))
        for (size_t p = 0; p < kLedgerParts; ++p) whole(*parts, name(LedgerPart(p)), l.parts[p]);
    whole(o, "unexplained_allowed", l.unexplained_allowed);
    objects(o, "unexplained_sites", [&](const JsonValue& s) {
        LedgerSite& site = l.unexplained_sites.emplace_back();
        if (const JsonValue* at = member(s, "site", T::object, "ledger.unexplained_sites.site")) source_line(*at, site.site);
        whole(s, "bytes", site.bytes);
    });
}

void FindingsReader::run(const JsonValue& o, Findings& f) const {
    text(o, "source", f.source);
    text(o, "format", f.format);
    word(o, "verdict", f.verdict, Verdict::cannot_judge);
    real(o, "leak_bytes_per_step", f.leak_bytes_per_step);
    real(o, "pinned_leak_bytes_per_step", f.pinned_leak_bytes_per_step);
    whole(o, "events", f.event_count);
    if (const JsonValue* steps = member(o, "steps", T::object, "steps")) {
        whole(*steps, "count", f.step_count);
        word(*steps, "source", f.steps_source, StepsSource::none);
        text(*steps, "detail", f.steps_detail);
        text(*steps, "unit", f.step_unit);
        whole(*steps, "warmup", f.warmup_steps);
        whole(*steps, "before_trace", f.steps_before_trace);
        whole(*steps, "window", f.window);
    }
    optional_whole(o, "projected_oom_step", f.projected_oom_step);
    devices(o, f);
    objects(o, "leaks", [&](const JsonValue& l) { leak(l, f.leaks.emplace_back()); });
    objects(o, "within_step", [&](const JsonValue& l) { within_step(l, f.within_step.emplace_back()); });
    objects(o, "peak", [&](const JsonValue& p) { peak(p, f.peaks.emplace_back()); });
    objects(o, "not_leaks", [&](const JsonValue& n) {
        NotLeak& not_leak = f.not_leaks.emplace_back();
        word(n, "kind", not_leak.kind, NotLeakKind::before_trace);
        whole(n, "bytes", not_leak.bytes);
        text(n, "why", not_leak.why);
        whole(n, "device", not_leak.device);
        if (const JsonValue* site = member(n, "site", T::object, "not_leaks.site")) source_line(*site, not_leak.site.emplace());
    });
    objects(o, "ledger", [&](const JsonValue& l) { ledger(l, f.ledger.emplace_back()); });
    objects(o, "usage", [&](const JsonValue& u) { usage(u, f.usage.emplace_back()); });
    texts(o, "notes", f.notes);
    texts(o, "warnings", f.warnings);
    texts(o, "input_faults", f.input_faults);
    if (const JsonValue* meta = member(o, "meta", T::object, "meta"))
        for (size_t k = 0; k < meta->keys.size(); ++k) {
            if (meta->items[k].type != T::string) bad("meta", meta->items[k], "a string");
            f.meta.emplace_back(meta->keys[k], meta->items[k].str);
        }
    real(o, "import_seconds", f.import_seconds);
    real(o, "analysis_seconds", f.analysis_seconds);
    f.allocated_any = true;  // it was judged: what --skip-empty leaves out never reaches a findings file
}

void FindingsReader::ranks(const JsonValue& o, RankComparison& r) const {
    objects(o, "rows", [&](const JsonValue& row) {
        RankRow& rank = r.rows.emplace_back();
        uint64_t number = 0;
        whole(row, "rank", number);
        rank.rank = int(number);
        whole(row, "run", rank.run);
        real(row, "leak_bytes_per_step", rank.leak_bytes_per_step);
        whole(row, "allocated", rank.allocated);
        whole(row, "peak_allocated", rank.peak_allocated);
    });
    texts(o, "skew", r.skew);
}

bool same_site(const SourceLine& a, const SourceLine& b) {
    return a.file == b.file && a.line == b.line && a.function == b.function;
}

}  // namespace

FindingsFile read_findings(std::string_view text, const std::string& name, const ReadLimits& limits) {
    const JsonValue doc = parse_json(text, name, kMaxJsonDepth, kMaxJsonDepth, limits.max_held_bytes);
    const FindingsReader read(name);
    if (doc.type != T::object) read.refuse(std::string("its root is ") + type_name(doc.type) + ", not an object");
    const JsonValue* several = doc.get("runs");
    if (several && several->type != T::array) read.refuse(std::string("\"runs\" is ") + type_name(several->type) + ", not an array");
    if (!several && !doc.get("verdict")) read.refuse("it has neither \"runs\" nor \"verdict\"");
    FindingsFile out;
    for (const JsonValue& run : several ? several->items : std::vector<JsonValue>{doc}) {
        if (run.type != T::object) read.refuse(std::string("a run is ") + type_name(run.type) + ", not an object");
        read.run(run, out.runs.emplace_back());
    }
    const JsonValue* r = doc.get("ranks");
    if (r && r->type != T::object && r->type != T::null) read.refuse(std::string("\"ranks\" is ") + type_name(r->type));
    if (r && r->type == T::object) read.ranks(*r, out.ranks);
    return out;
}

void attach_owners(Findings& f, std::string_view owners_json, const std::string& name) {
    const JsonValue doc = parse_json(owners_json, name, kMaxJsonDepth);
    const FindingsReader read(name);
    if (doc.type != T::array) throw std::runtime_error(name + ": not an owners file (a list of explained leaks)");
    for (const JsonValue& answer : doc.items) {
        if (answer.type != T::object) read.bad("owners", answer, "an object");
        SiteFinding found;  // read as a leak: the same site, device, memory and owners fields
        read.leak(answer, found);
        std::optional<uint64_t> at_step;
        read.optional_whole(answer, "found_at_step", at_step);
        if (answer.get("unit")) {  // a leak inside a step's, found at its highest point
            for (WithinStepLeak& l : f.within_step)
                if (l.device == found.device && same_site(l.site, found.site) && l.owners.empty()) {
                    l.owners = found.owners;
                    l.owners_found_at_step = at_step;
                }
            continue;
        }
        // An answer that names no memory is for any leak at its site (owners files before memory had one).
        const bool any_memory = !answer.get("memory");
        // And one with no `allocated_in` for any library function under it (before sites split by one).
        const bool any_function = !answer.get("allocated_in");
        const auto same_function = [](const std::optional<SourceLine>& a, const std::optional<SourceLine>& b) {
            return a.has_value() == b.has_value() && (!a || (a->file == b->file && a->function == b->function));
        };
        for (SiteFinding& l : f.leaks)
            if (l.device == found.device && same_site(l.site, found.site) && (any_memory || l.memory == found.memory) &&
                (any_function || same_function(l.allocated_in, found.allocated_in))) {
                l.owners = found.owners;
                l.owners_found_at_step = at_step;
            }
    }
}

std::string report_data_from_findings(const std::vector<std::string>& texts, const std::vector<std::string>& names) {
    std::vector<Findings> runs;
    RankComparison ranks;
    for (size_t k = 0; k < texts.size(); ++k) {
        FindingsFile file = read_findings(texts[k], names[k]);
        if (ranks.rows.empty()) ranks = std::move(file.ranks);
        for (Findings& f : file.runs) runs.push_back(std::move(f));
    }
    return to_report_json(runs, ranks);
}

}  // namespace vramscope
