#include "compare/cells.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "common/file.h"
#include "common/format.h"
#include "findings/json.h"
#include "findings/json_reader.h"

namespace vramscope {
namespace {

constexpr uint64_t kMaxCompareFile = 64ull << 20;  // compare.json: a few KiB a cell
constexpr uint64_t kMaxFindingsFile = 2ull << 30;  // a findings file: its timeline grows with the steps
constexpr unsigned kKeepDepth = 4;                 // cells[].trees{} is the deepest read

constexpr double kMaxBytes = 0x1.fffffffffffffp63;  // the largest double a uint64_t holds (2^64 is none)
constexpr double kMaxStep = 9007199254740992.0;        // 2^53: every whole number up to it is exact
constexpr double kMaxExitCode = 2147483648.0;
constexpr double kMaxSeconds = 1e12;

// A bound as text, negative ones too (uint64_t of a negative double is undefined).
std::string bound(double x) { return x < 0 ? "-" + format_count(uint64_t(-x)) : format_count(uint64_t(x)); }

std::runtime_error bad(const std::string& file, const std::string& why) { return std::runtime_error(file + ": " + why); }

// Where numbers are read: the file, and the field's place in it for errors.
struct Numbers {
    const std::string& file;
    // A number in [lo, hi], nullopt when absent or null. Anything else is the file's error naming
    // the field: 1e999, a negative rate or a string would otherwise become a status.
    std::optional<double> get(const JsonValue* v, double lo, double hi, std::string_view field) const {
        if (!v || v->type == JsonValue::Type::null) return std::nullopt;
        const double x = v->type == JsonValue::Type::number ? std::strtod(std::string(v->text).c_str(), nullptr) : NAN;
        if (!(std::isfinite(x) && x >= lo && x <= hi))
            throw bad(file, std::string(field) + ": " + std::string(v->text.substr(0, 40)) + " is not a number from " +
                                bound(lo) + " to " + bound(hi));
        return x;
    }
    double get_or_0(const JsonValue* v, double hi, std::string_view field) const { return get(v, 0, hi, field).value_or(0); }
    std::optional<int64_t> whole(const JsonValue* v, std::string_view field) const {
        const auto x = get(v, 0, kMaxStep, field);
        return x ? std::optional<int64_t>(int64_t(*x)) : std::nullopt;
    }
};

std::string string(const JsonValue* v) { return v && v->type == JsonValue::Type::string ? v->str : std::string(); }
const std::vector<JsonValue>& items(const JsonValue* v) {
    static const std::vector<JsonValue> none;
    return v && v->type == JsonValue::Type::array ? v->items : none;
}

CellOutcome outcome_named(const std::string& s, const std::string& file) {
    for (auto o : {CellOutcome::finished, CellOutcome::failed, CellOutcome::out_of_memory, CellOutcome::timed_out,
                   CellOutcome::not_run, CellOutcome::interrupted, CellOutcome::error})
        if (s == name(o)) return o;
    throw bad(file, "unknown cell state \"" + s + "\"");
}

// A site's file as it is in the user's tree: cells that ran a patched copy name the copy.
std::string in_user_tree(std::string file, const JsonValue* trees) {
    if (trees && trees->type == JsonValue::Type::object)
        for (size_t i = 0; i < trees->keys.size(); ++i) {
            const std::string& copy = trees->keys[i];
            if (file.compare(0, copy.size(), copy) == 0 && (file.size() == copy.size() || file[copy.size()] == '/'))
                return string(&trees->items[i]) + file.substr(copy.size());
        }
    return file;
}

// A rate the table compares: what a status is measured from, so never negative, infinite or NaN.
double rate(double bytes_per_step, const std::string& file, std::string_view field) {
    if (!(std::isfinite(bytes_per_step) && bytes_per_step >= 0 && bytes_per_step <= kMaxBytes))
        throw bad(file, std::string(field) + ": " + format_count(uint64_t(std::max(0.0, bytes_per_step))) +
                            " is not a number from 0 to " + format_count(uint64_t(kMaxBytes)));
    return bytes_per_step;
}
uint64_t step(uint64_t s, const std::string& file, std::string_view field) {
    if (double(s) > kMaxStep) throw bad(file, std::string(field) + ": " + std::to_string(s) + " is past 2^53");
    return s;
}

void add_run(const Findings& run, const JsonValue* trees, const std::string& file, CellResult& cell) {
    // A run that says LEAK carries its rate: without one, no status can be measured from it.
    if (run.verdict == Verdict::leak && !(run.leak_bytes_per_step > 0)) throw bad(file, "a leaking run without leak_bytes_per_step");
    cell.leak_bytes_per_step = std::max(cell.leak_bytes_per_step, rate(run.leak_bytes_per_step, file, "leak_bytes_per_step"));
    cell.steps = std::max(cell.steps, int64_t(step(run.step_count, file, "steps.count")));
    auto earliest = [&](std::optional<int64_t>& into, std::optional<uint64_t> v, std::string_view field) {
        if (v && (!into || int64_t(step(*v, file, field)) < *into)) into = int64_t(*v);
    };
    for (const DeviceSummary& d : run.devices) {
        for (const StepPoint& p : d.timeline) {
            cell.peak_allocated = std::max(cell.peak_allocated, p.peak_allocated);
            cell.peak_reserved = std::max(cell.peak_reserved, p.reserved);
        }
        earliest(cell.oom_step, d.oom_step, "devices.oom_step");
    }
    earliest(cell.projected_oom_step, run.projected_oom_step, "projected_oom_step");
    for (const DevicePeak& p : run.peaks)
        if (p.bytes >= cell.peak_allocated) cell.peak_categories = p.categories;
    for (const SiteFinding& l : run.leaks) {
        const std::string file_in_tree = in_user_tree(l.site.file, trees);
        CellLeak leak;
        leak.site = base_name(file_in_tree) + ":" + std::to_string(l.site.line) + " " + l.site.function;
        leak.site_key = file_in_tree + "\n" + l.site.function;
        leak.side_stream = std::string_view(stream_kind(l.stream)) == "side";
        leak.bytes_per_step = rate(l.bytes_per_step, file, "leaks.bytes_per_step");
        if (!(leak.bytes_per_step > 0)) throw bad(file, "a leak without a rate above 0 (leaks.bytes_per_step)");
        leak.first_step = int64_t(step(l.first_step, file, "leaks.first_step"));
        if (!l.owners.empty()) leak.owner = owner_line(l.owners.front());
        earliest(cell.growth_start_step, l.first_step, "leaks.first_step");
        cell.leaks.push_back(std::move(leak));
    }
}

void read_findings_of(const std::string& path, const JsonValue* trees, CellResult& cell) {
    const Bytes text = read_file(path, kMaxFindingsFile);
    const FindingsFile file = read_findings(view(text), path);
    Verdict verdict = Verdict::no_leak;
    for (const Findings& run : file.runs) {
        verdict = worse(verdict, run.verdict);
        add_run(run, trees, path, cell);
    }
    cell.verdict = verdict;
    cell.host_memory_only = !file.runs.empty() && std::all_of(file.runs.begin(), file.runs.end(), [](const Findings& run) {
        return !run.devices.empty() && std::all_of(run.devices.begin(), run.devices.end(),
                                                   [&](const DeviceSummary& d) { return run.host_memory(d.device); });
    });
    if (cell.verdict == Verdict::leak && !(cell.leak_bytes_per_step > 0)) throw bad(path, "LEAK without a rate above 0");
    std::stable_sort(cell.leaks.begin(), cell.leaks.end(),
                     [](const CellLeak& a, const CellLeak& b) { return a.bytes_per_step > b.bytes_per_step; });
    if (cell.verdict != Verdict::leak) cell.leak_bytes_per_step = 0;
    cell.analysed = true;
}

std::string cell_key(std::string_view mode, std::string_view row) {
    return std::string(mode) + '\0' + std::string(row);
}

std::string directory_of(const std::string& path) {
    size_t slash = path.rfind('/');
    return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

}  // namespace

std::string_view name(CellOutcome o) {
    switch (o) {
        case CellOutcome::finished: return "finished";
        case CellOutcome::failed: return "failed";
        case CellOutcome::out_of_memory: return "out-of-memory";
        case CellOutcome::timed_out: return "timed-out";
        case CellOutcome::not_run: return "not-run";
        case CellOutcome::interrupted: return "interrupted";
        case CellOutcome::error: return "error";
    }
    return "?";
}

const CellResult* CompareRun::cell(std::string_view mode, std::string_view row) const {
    const auto at = cell_index.find(cell_key(mode, row));
    return at == cell_index.end() ? nullptr : &cells[at->second];
}

CompareRun read_compare(const std::string& path) {
    Bytes text = read_file(path, kMaxCompareFile);
    JsonValue root = parse_json(view(text), path, kKeepDepth);
    if (root.type != JsonValue::Type::object || string(root.get("schema")) != "vramscope.compare")
        throw bad(path, "not a vramscope compare result (schema \"vramscope.compare\")");
    CompareRun run;
    const Numbers numbers{path};
    for (const JsonValue& c : items(root.get("command"))) run.command.push_back(string(&c));
    run.step_limit = numbers.whole(root.get("steps"), "steps").value_or(0);
    run.wall_seconds = numbers.get_or_0(root.get("wall_seconds"), kMaxSeconds, "wall_seconds");
    run.complete = !root.get("complete") || root.get("complete")->text == "true";
    for (const JsonValue& m : items(root.get("modes"))) run.modes.push_back(string(&m));
    for (const JsonValue& r : items(root.get("rows"))) {
        CompareRow row{string(r.get("name")), string(r.get("label")), {}};
        for (const JsonValue& c : items(r.get("changes"))) row.changes.push_back(string(&c));
        run.rows.push_back(std::move(row));
    }
    if (run.modes.empty() || run.rows.empty() || run.rows[0].name != "baseline")
        throw bad(path, "no modes, or no baseline row first");
    const std::string base = directory_of(path);
    for (const JsonValue& c : items(root.get("cells"))) {
        CellResult cell;
        cell.mode = string(c.get("mode"));
        cell.variant = string(c.get("variant"));
        cell.outcome = outcome_named(string(c.get("state")), path);
        if (const auto rc = numbers.get(c.get("rc"), -kMaxExitCode, kMaxExitCode, "cells.rc")) cell.exit_code = int64_t(*rc);
        cell.wall_seconds = numbers.get_or_0(c.get("wall_seconds"), kMaxSeconds, "cells.wall_seconds");
        cell.reason = string(c.get("reason"));
        cell.report = string(c.get("report"));
        cell.log = string(c.get("log"));
        const std::string findings = string(c.get("findings"));
        if (!findings.empty()) {
            cell.findings_file = findings[0] == '/' ? findings : base + findings;
            CellResult unread = cell;
            try {
                read_findings_of(cell.findings_file, c.get("trees"), cell);
            } catch (const std::runtime_error& e) {  // this cell cannot be judged; the others still can
                cell = std::move(unread);
                cell.reason = e.what();
            }
        }
        if (!run.cell_index.emplace(cell_key(cell.mode, cell.variant), run.cells.size()).second)
            throw bad(path, "two cells for " + cell.mode + "/" + cell.variant);
        run.cells.push_back(std::move(cell));
    }
    for (const std::string& mode : run.modes)
        for (const CompareRow& row : run.rows)
            if (!run.cell(mode, row.name)) throw bad(path, "no cell for " + mode + "/" + row.name);
    return run;
}

}  // namespace vramscope
