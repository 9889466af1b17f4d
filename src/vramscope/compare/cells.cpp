#include "compare/cells.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "common/file.h"
#include "common/format.h"
#include "findings/json_reader.h"

namespace vramscope {
namespace {

constexpr uint64_t kMaxCompareFile = 64ull << 20;  // compare.json: a few KiB a cell
constexpr uint64_t kMaxFindingsFile = 2ull << 30;  // a findings file: its timeline grows with the steps
constexpr unsigned kKeepDepth = 8;                 // runs[].leaks[].owners[].path is the deepest read

std::runtime_error bad(const std::string& file, const std::string& why) { return std::runtime_error(file + ": " + why); }

double number(const JsonValue* v) {
    return v && v->type == JsonValue::Type::number ? std::strtod(std::string(v->text).c_str(), nullptr) : 0;
}
std::optional<int64_t> optional_int(const JsonValue* v) {
    if (!v || v->type != JsonValue::Type::number) return std::nullopt;
    return int64_t(number(v));
}
std::string string(const JsonValue* v) { return v && v->type == JsonValue::Type::string ? v->str : std::string(); }
const std::vector<JsonValue>& items(const JsonValue* v) {
    static const std::vector<JsonValue> none;
    return v && v->type == JsonValue::Type::array ? v->items : none;
}

Verdict verdict_named(const std::string& s, const std::string& file) {
    for (Verdict v : {Verdict::no_leak, Verdict::leak, Verdict::cannot_judge})
        if (s == name(v)) return v;
    throw bad(file, "unknown verdict \"" + s + "\"");
}

CellOutcome outcome_named(const std::string& s, const std::string& file) {
    for (auto o : {CellOutcome::finished, CellOutcome::failed, CellOutcome::out_of_memory, CellOutcome::timed_out,
                   CellOutcome::not_run, CellOutcome::interrupted})
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

void read_run(const JsonValue& run, const JsonValue* trees, CellResult& cell) {
    cell.leak_bytes_per_step = std::max(cell.leak_bytes_per_step, number(run.get("leak_bytes_per_step")));
    if (const JsonValue* steps = run.get("steps")) cell.steps = std::max(cell.steps, int64_t(number(steps->get("count"))));
    for (const JsonValue& t : items(run.get("timeline"))) {
        cell.peak_allocated = std::max(cell.peak_allocated, uint64_t(number(t.get("peak_allocated"))));
        cell.peak_reserved = std::max(cell.peak_reserved, uint64_t(number(t.get("reserved"))));
    }
    auto earliest = [](std::optional<int64_t>& into, std::optional<int64_t> v) {
        if (v && (!into || *v < *into)) into = v;
    };
    for (const JsonValue& d : items(run.get("devices"))) earliest(cell.oom_step, optional_int(d.get("oom_step")));
    earliest(cell.projected_oom_step, optional_int(run.get("projected_oom_step")));
    for (const JsonValue& l : items(run.get("leaks"))) {
        const JsonValue* site = l.get("site");
        std::string file = in_user_tree(string(site ? site->get("file") : nullptr), trees);
        std::string function = string(site ? site->get("function") : nullptr);
        CellLeak leak;
        leak.site = base_name(file) + ":" + std::to_string(int64_t(number(site ? site->get("line") : nullptr))) + " " + function;
        leak.site_key = file + "\n" + function;
        leak.side_stream = string(l.get("stream_kind")) == "side";
        leak.bytes_per_step = number(l.get("bytes_per_step"));
        leak.first_step = int64_t(number(l.get("first_step")));
        const auto& owners = items(l.get("owners"));
        if (!owners.empty()) leak.owner = string(owners[0].get("path")) + "  → " + string(owners[0].get("target"));
        earliest(cell.growth_start_step, leak.first_step);
        cell.leaks.push_back(std::move(leak));
    }
}

void read_findings(const std::string& path, const JsonValue* trees, CellResult& cell) {
    Bytes text = read_file(path, kMaxFindingsFile);
    JsonValue root = parse_json(view(text), path, kKeepDepth);
    if (root.type != JsonValue::Type::object || !root.get("verdict")) throw bad(path, "not a findings JSON (no verdict)");
    cell.verdict = verdict_named(string(root.get("verdict")), path);
    if (const JsonValue* runs = root.get("runs"))
        for (const JsonValue& run : items(runs)) read_run(run, trees, cell);
    else
        read_run(root, trees, cell);
    std::stable_sort(cell.leaks.begin(), cell.leaks.end(),
                     [](const CellLeak& a, const CellLeak& b) { return a.bytes_per_step > b.bytes_per_step; });
    if (cell.verdict != Verdict::leak) cell.leak_bytes_per_step = 0;
    cell.analysed = true;
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
    }
    return "?";
}

const CellResult* CompareRun::cell(std::string_view mode, std::string_view row) const {
    for (const CellResult& c : cells)
        if (c.mode == mode && c.variant == row) return &c;
    return nullptr;
}

CompareRun read_compare(const std::string& path) {
    Bytes text = read_file(path, kMaxCompareFile);
    JsonValue root = parse_json(view(text), path, kKeepDepth);
    if (root.type != JsonValue::Type::object || string(root.get("schema")) != "vramscope.compare")
        throw bad(path, "not a vramscope compare result (schema \"vramscope.compare\")");
    CompareRun run;
    for (const JsonValue& c : items(root.get("command"))) run.command.push_back(string(&c));
    run.step_limit = int64_t(number(root.get("steps")));
    run.wall_seconds = number(root.get("wall_seconds"));
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
        cell.exit_code = optional_int(c.get("rc"));
        cell.wall_seconds = number(c.get("wall_seconds"));
        cell.reason = string(c.get("reason"));
        cell.report = string(c.get("report"));
        cell.log = string(c.get("log"));
        std::string findings = string(c.get("findings"));
        if (!findings.empty()) read_findings(findings[0] == '/' ? findings : base + findings, c.get("trees"), cell);
        run.cells.push_back(std::move(cell));
    }
    for (const std::string& mode : run.modes)
        for (const CompareRow& row : run.rows)
            if (!run.cell(mode, row.name)) throw bad(path, "no cell for " + mode + "/" + row.name);
    return run;
}

}  // namespace vramscope
