#include "cli/options.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "common/format.h"
#include "trace/format.h"

namespace vramscope {
namespace {

// The largest chunk convert writes: half of what a reader accepts, as a chunk's payload may grow
// past its events by its tables.
constexpr uint64_t kMaxChunkBytes = format::kMaxChunkPayload / 2;
// Reading holds at least a MiB of buffers, and an error then speaks of whole MiB.
constexpr uint64_t kMinHeldBytes = 1 << 20;
constexpr uint64_t kNoMax = UINT64_MAX;

// A whole number from min to max, or a usage error naming the option: never wrapped or cut.
uint64_t whole_number(const std::string& text, uint64_t min, uint64_t max, const std::string& option) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || !std::isdigit(uint8_t(text[0])) || *end || errno || v < min || v > max)
        throw UsageError(option + " takes a whole number from " + std::to_string(min) + " to " + std::to_string(max));
    return v;
}

// --steps A:B (either end may be left out).
void step_range(CommandOptions& o, const std::string& v) {
    const size_t colon = v.find(':');
    if (colon == std::string::npos) throw UsageError("--steps takes A:B, e.g. 100:500, 100: or :500");
    if (colon > 0) o.analysis.first_step = whole_number(v.substr(0, colon), 0, UINT32_MAX, "--steps");
    if (colon + 1 < v.size()) o.analysis.last_step = whole_number(v.substr(colon + 1), 0, UINT32_MAX, "--steps");
    if (o.analysis.last_step < o.analysis.first_step) throw UsageError("--steps A:B needs A <= B");
}

void judged(CommandOptions& o, const char* option) {
    if (o.analysis_option.empty()) o.analysis_option = option;
}

const std::vector<std::string> kLimits = {"--max-decoded", "--max-memory", "--max-string", "--max-depth"};

// Each line of a paragraph, indented.
std::string indented(const std::string& text, const std::string& indent) {
    std::string out;
    for (size_t from = 0; from < text.size();) {
        const size_t end = std::min(text.find('\n', from), text.size());
        out += indent + text.substr(from, end - from) + "\n";
        from = end + 1;
    }
    return out;
}

std::vector<std::string> with_limits(std::vector<std::string> names) {
    names.insert(names.end(), kLimits.begin(), kLimits.end());
    return names;
}

}  // namespace

uint64_t size_with_unit(const std::string& text, const std::string& option, uint64_t min, uint64_t max) {
    const std::string range = "from " + format_bytes(double(min)) + (max == kNoMax ? "" : " to " + format_bytes(double(max)));
    const std::string takes = option + " takes a size " + range + ", such as " + (max < (1ull << 30) ? "64KiB or 4MiB" : "80GiB or 512MiB");
    const size_t first = text.find_first_not_of(" \t");
    if (first != std::string::npos && text[first] == '-') throw UsageError(option + " " + text + ": a size is never negative; " + takes);
    char* end = nullptr;
    const double number = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || !(number >= 0)) throw UsageError(takes);
    std::string unit(end);  // as written, without the spaces around it: "MB a step" stays itself
    const size_t unit_from = unit.find_first_not_of(" \t"), unit_to = unit.find_last_not_of(" \t");
    unit = unit_from == std::string::npos ? "" : unit.substr(unit_from, unit_to - unit_from + 1);
    uint64_t bytes = 0;
    if (unit.empty()) {
        // A bare number: the two largest units that make it a size in range, and no larger than a
        // device (no "4096GiB" for a chunk, no "80TiB" for a GPU, no "0GiB" at all: 0 is "0B").
        std::string hint;
        for (const char* u : {"TiB", "GiB", "MiB", "KiB", "B"})
            if (parse_bytes(text + u, bytes) && bytes >= min && bytes <= std::min<uint64_t>(max, 1ull << 40) &&
                (number > 0 || std::string_view(u) == "B") && std::count(hint.begin(), hint.end(), ',') < 1)
                hint += (hint.empty() ? "" : ", or ") + text + u;
        if (hint.empty()) throw UsageError(takes);
        throw UsageError(option + " " + text + ": give the unit, e.g. " + hint + " (B for bytes)");
    }
    if (!parse_bytes(text, bytes)) {
        if (std::isalpha(uint8_t(unit[0])))
            throw UsageError(option + " " + text + ": unknown unit " + unit + " (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
        throw UsageError(takes);
    }
    if (bytes < min || bytes > max) throw UsageError(takes);
    return bytes;
}

const std::vector<Option>& options() {
    static const std::vector<Option> table = {
        {"--json", "", "OUT", "also write the result as JSON (- for stdout, and nothing else there)",
         [](CommandOptions& o, const std::string& v) { o.json = v; }},
        {"--html", "", "OUT", "also write it as one self-contained HTML page (what `report` writes)",
         [](CommandOptions& o, const std::string& v) { o.html = v; }},
        {"-o", "--output", "OUT.html", "the report page to write",
         [](CommandOptions& o, const std::string& v) { o.html = v; }},
        {"--markdown", "", "OUT.md", "also write the table as Markdown",
         [](CommandOptions& o, const std::string& v) { o.markdown = v; }},
        {"--window", "", "W", "an allocation survives if still live W steps later (default " + std::to_string(JudgeSettings{}.window) + ")",
         [](CommandOptions& o, const std::string& v) { o.analysis.judge.window = uint32_t(whole_number(v, 1, JudgeSettings::kMaxWindow, "--window")), judged(o, "--window"); }},
        {"--warmup", "", "N", "steps not judged at the start (default " + std::to_string(kWarmupSteps) + ", fewer in runs too short to judge, as the live monitor)",
         [](CommandOptions& o, const std::string& v) { o.analysis.judge.warmup = int(whole_number(v, 0, 1000000, "--warmup")), judged(o, "--warmup"); }},
        {"--steps", "", "A:B", "judge steps A to B only (read up to B's end; A replaces the warm-up); either end may be left out",
         [](CommandOptions& o, const std::string& v) { step_range(o, v), judged(o, "--steps"); }},
        {"--device-memory", "", "SIZE", "GPU capacity for the OOM projection, with its unit: 80GiB (default: from the trace)",
         [](CommandOptions& o, const std::string& v) { o.analysis.device_memory = size_with_unit(v, "--device-memory", 1 << 20, kNoMax); }},
        {"--fail-on-leak", "", "", "exit 1 when a leak is found, 2 when an input cannot be judged (for CI)",
         [](CommandOptions& o, const std::string&) { o.fail_on_leak = true; }},
        {"--skip-empty", "", "", "leave out processes that never allocated (compile and data workers)",
         [](CommandOptions& o, const std::string&) { o.skip_empty = true; }},
        {"--memory-viz", "", "OUT.pickle", "a torch snapshot pickle for https://pytorch.org/memory_viz (OUT.pickle.gz: gzip'd)",
         [](CommandOptions& o, const std::string& v) { o.memory_viz = v; }},
        {"--perfetto", "", "OUT.json", "trace events for https://ui.perfetto.dev (memory counters, steps, leak starts)",
         [](CommandOptions& o, const std::string& v) { o.perfetto = v; }},
        {"--chunk-size", "", "SIZE", "what a cut file loses at most: from 1 B to " + format_bytes(double(kMaxChunkBytes)) + " (default 64 KiB)",
         [](CommandOptions& o, const std::string& v) { o.chunk_bytes = size_with_unit(v, "--chunk-size", 1, kMaxChunkBytes); }},
        {"--max-decoded", "", "SIZE", "bytes read or inflated from gzip (default 16 GiB)",
         [](CommandOptions& o, const std::string& v) { o.limits.max_decoded_bytes = size_with_unit(v, "--max-decoded", 1, kNoMax); }},
        {"--max-memory", "", "SIZE", "what an input makes us hold (pickle values, events, strings, timelines, an output): from 1 MiB (default 1 GiB; peak memory stays under it + 256 MiB)",
         [](CommandOptions& o, const std::string& v) { o.limits.max_held_bytes = size_with_unit(v, "--max-memory", kMinHeldBytes, kNoMax); }},
        {"--max-string", "", "SIZE", "one string in a pickle (default 16 MiB)",
         [](CommandOptions& o, const std::string& v) { o.limits.max_string_bytes = size_with_unit(v, "--max-string", 1, kNoMax); }},
        {"--max-depth", "", "N", "containers open at once in a pickle (default 256)",
         [](CommandOptions& o, const std::string& v) { o.limits.max_depth = uint32_t(whole_number(v, 1, 1u << 20, "--max-depth")); }},
    };
    return table;
}

const std::vector<Command>& commands() {
    static const std::vector<Command> table = {
        {"analyze", "FILE...", 1, SIZE_MAX,
         "Decide whether memory leaks, where, and how fast. FILE: a .vscope trace or a torch memory\n"
         "snapshot (torch.cuda.memory._dump_snapshot; .pickle or .pickle.gz).",
         with_limits({"--json", "--html", "--window", "--warmup", "--steps", "--device-memory", "--fail-on-leak", "--skip-empty"})},
        {"report", "FILE...", 1, SIZE_MAX,
         "Write the report: one self-contained HTML page that opens offline. It shows the verdict,\n"
         "memory per step with the leaked part by site, the leak table with stacks and owners, what is\n"
         "not a leak, streams and ranks. FILE may also be findings JSON (analyze --json), all of them then.",
         with_limits({"-o", "--window", "--warmup", "--steps", "--device-memory"}), {"-o"}},
        {"export", "FILE", 1, 1,
         "For your other tools: a torch snapshot pickle for memory_viz, and trace events for Perfetto.\n"
         "The pickle keeps what torch's viewers read: the trace, the segments and their blocks at the end,\n"
         "the annotations and the allocator's settings.",
         with_limits({"--memory-viz", "--perfetto"})},
        {"convert", "IN OUT.vscope", 2, 2,
         "Convert a torch snapshot to the compact .vscope trace format.",
         with_limits({"--chunk-size"})},
        {"diff", "A B", 2, 2,
         "Two runs side by side: peaks by category and by site, leaks gone, new or changed.\n"
         "A, B: each a .vscope trace, a torch snapshot or a findings JSON of one run.",
         with_limits({"--json", "--html", "--window", "--warmup", "--steps", "--device-memory"})},
        {"compare-table", "OUT/compare.json", 1, 1,
         "The table of a `vramscope compare` run again (statuses from its cells' findings).",
         {"--markdown", "--json", "--html"}},
    };
    return table;
}

const Command& command(std::string_view name) {
    std::string known;
    for (const Command& c : commands()) {
        if (c.name == name) return c;
        known += (known.empty() ? "" : ", ") + c.name;
    }
    throw UsageError("unknown command '" + std::string(name) + "' (" + known + ")");
}

const Option& option_of(const Command& c, std::string_view name) {
    for (const Option& o : options())
        if ((o.name == name || (!o.alias.empty() && o.alias == name)) &&
            std::find(c.options.begin(), c.options.end(), o.name) != c.options.end())
            return o;
    throw UsageError(c.name + ": unknown option " + std::string(name));
}

void apply_option(const Command& c, CommandOptions& into, std::string_view name, const std::string& value) {
    const Option& o = option_of(c, name);
    if (!o.value.empty() && value.empty()) throw UsageError(o.name + " needs a value");  // "" would mean "not given"
    o.apply(into, value);
}

std::string command_usage(const Command& c, std::string_view program) {
    std::string required;
    for (const std::string& name : c.required) required += " " + name + " " + option_of(c, name).value;
    std::string out = "usage: " + std::string(program) + " " + c.name + " " + c.inputs + required + " [options]\n\n";
    out += indented(c.summary, "  ") + "\n";
    for (const std::string& name : c.options) {
        const Option& o = option_of(c, name);
        std::string head = o.name + (o.alias.empty() ? "" : ", " + o.alias) + (o.value.empty() ? "" : " " + o.value);
        head.resize(std::max<size_t>(head.size() + 2, 24), ' ');
        out += "  " + head + o.help + "\n";
    }
    return out;
}

std::string usage(std::string_view program) {
    std::string out = "usage: " + std::string(program) + " COMMAND ...   (" + std::string(program) +
                      " COMMAND --help: its options)\n\n";
    for (const Command& c : commands()) {
        out += "  " + c.name + " " + c.inputs + "\n" + indented(c.summary, "        ");
    }
    return out + "  --version, -V           print the version\n";
}

}  // namespace vramscope
