#include "cli/cli.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <stdexcept>

#include "analysis/analyze.h"
#include "analysis/ranks.h"
#include "common/file.h"
#include "common/format.h"
#include "common/progress.h"
#include "compare/cells.h"
#include "compare/table.h"
#include "findings/json.h"
#include "findings/json_reader.h"
#include "importers/torch_snapshot.h"
#include "render/export.h"
#include "render/html.h"
#include "render/terminal.h"
#include "trace/format.h"
#include "trace/writer.h"

namespace vramscope {
namespace {

constexpr const char* kUsage = R"(usage: vramscope COMMAND ...

  analyze FILE... [--json OUT] [--html OUT] [--window W] [--warmup N] [--steps A:B] [--device-memory SIZE] [--fail-on-leak]
        Decide whether memory leaks, where, and how fast. FILE: a .vscope trace or a torch
        memory snapshot (torch.cuda.memory._dump_snapshot; .pickle or .pickle.gz).
        --json OUT        also write the findings as JSON (- for stdout, no summary)
        --html OUT        also write the report page (what `report` writes)
        --window W        an allocation survives if still live W steps later (default 1)
        --warmup N        steps not judged at the start (default 3, as the live monitor)
        --steps A:B       judge steps A to B only (read up to B's end; A replaces the warm-up)
        --device-memory   GPU capacity for the OOM projection, e.g. 80GiB (default: from trace)
        --fail-on-leak    exit 1 when a leak is found, 2 when the input cannot be judged (for CI)
  run [-o OUT] [--fail-on-leak] -- COMMAND...
        Run a training command with live capture (no code change); see `vramscope run --help`.
  report FILE... -o OUT.html [--window W] [--warmup N] [--device-memory SIZE]
        One self-contained HTML page (opens offline): verdict, memory per step with the leaked
        part by site, the leak table with stacks and owners, what is not a leak, streams, ranks.
        FILE may also be findings JSON (analyze --json), all of them then.
  export FILE [--memory-viz OUT.pickle] [--perfetto OUT.json]
        For your other tools: a torch snapshot pickle for https://pytorch.org/memory_viz, and a
        trace-event JSON for https://ui.perfetto.dev (memory counters, steps, leak starts).
  convert IN OUT.vscope [--chunk-size SIZE]
        Convert a torch snapshot to the compact .vscope trace format; chunks of SIZE (default
        64KiB, at most 16MiB) are what a cut file loses at most.
  compare [MATRIX.toml] [--variant NAME=KIND:VALUE]... [--mode NAME=ARGS]... [-- COMMAND...]
        Candidate fixes x modes, each in a fresh process under live capture: which fixes the
        leak (see `vramscope compare --help`).
  compare-table OUT/compare.json [--markdown OUT.md] [--json OUT.json] [--html OUT.html]
        The table of a compare run again (statuses from its cells' findings).
  demo                    Analyse a bundled real trace of a leaking training run.

Limits on reading one input (analyze, report, export, convert), each error naming the limit:
        --max-decoded SIZE  bytes read or inflated from gzip (default 16GiB)
        --max-memory SIZE   pickle values held at once, and events kept, each (default 2GiB)
        --max-string SIZE   one string in a pickle (default 16MiB)
        --max-depth N       containers open at once in a pickle (default 256)
  version                 Print the version.
)";

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

bool color_wanted() { return isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR"); }

// A whole number from min to max, or a usage error naming the option: never wrapped or cut.
uint64_t whole_number(const std::string& text, uint64_t min, uint64_t max, const std::string& option) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || !std::isdigit(uint8_t(text[0])) || *end || errno || v < min || v > max)
        throw UsageError(option + " takes a whole number from " + std::to_string(min) + " to " + std::to_string(max));
    return v;
}

// An option's value (args[i] the option; i then at its value): present and not empty, as an
// empty one would silently mean "not given".
const std::string& option_value(const std::vector<std::string>& args, size_t& i) {
    if (i + 1 >= args.size() || args[i + 1].empty()) throw UsageError(args[i] + " needs a value");
    return args[++i];
}

// The limit options; true when args[i] was one (i then at its value).
bool limit_option(const std::vector<std::string>& args, size_t& i, ReadLimits& limits) {
    const std::string& a = args[i];
    uint64_t* size = a == "--max-decoded" ? &limits.max_decoded_bytes
                   : a == "--max-memory"  ? &limits.max_held_bytes
                   : a == "--max-string"  ? &limits.max_string_bytes
                                          : nullptr;
    if (!size && a != "--max-depth") return false;
    const std::string& v = option_value(args, i);
    if (!size) limits.max_depth = uint32_t(whole_number(v, 1, 1u << 20, a));
    else if (!parse_bytes(v, *size) || *size == 0) throw UsageError(a + " takes a size such as 4GiB or 512MiB");
    return true;
}

// Reading and analysing one input; running out of memory names the file.
Trace load(const std::string& path, const ReadLimits& limits) {
    try {
        return load_any(path, limits);
    } catch (const std::bad_alloc&) {
        throw std::runtime_error(path + ": out of memory while reading it (--max-memory bounds what reading holds)");
    }
}
// A conversion or export would drop the faults and pass the content on as if it were sound.
void require_trusted(const Trace& t) {
    if (t.faults.empty()) return;
    std::string why = t.source + ": cannot be trusted, so it is not passed on:";
    for (const auto& f : t.faults) why += "\n  " + f;
    throw std::runtime_error(why);
}
Findings analyze_input(const Trace& trace, const AnalysisOptions& opt) {
    try {
        return analyze(trace, opt);
    } catch (const std::bad_alloc&) {
        throw std::runtime_error(trace.source + ": out of memory while analysing it");
    }
}
// Reading and analysing one input at once (a .vscope trace streams through).
Findings analyze_path(const std::string& path, const AnalysisOptions& opt, const ReadLimits& limits) {
    try {
        return analyze_file(path, opt, limits);
    } catch (const std::bad_alloc&) {
        throw std::runtime_error(path + ": out of memory while reading it (--max-memory bounds what reading holds)");
    }
}

// --steps A:B (either end may be left out).
void parse_step_range(const std::string& v, AnalysisOptions& opt) {
    const size_t colon = v.find(':');
    if (colon == std::string::npos) throw UsageError("--steps takes A:B, e.g. 100:500, 100: or :500");
    if (colon > 0) opt.first_step = whole_number(v.substr(0, colon), 0, UINT32_MAX, "--steps");
    if (colon + 1 < v.size()) opt.last_step = whole_number(v.substr(colon + 1), 0, UINT32_MAX, "--steps");
    if (opt.last_step < opt.first_step) throw UsageError("--steps A:B needs A <= B");
}

// Every command that writes asks this first, with all it reads and all it will write (by
// option; "" and "-" are no file): no output may be an input, nor two outputs one file.
void refuse_overwriting(const std::vector<std::string>& inputs,
                        const std::vector<std::pair<std::string, std::string>>& outputs) {
    for (size_t k = 0; k < outputs.size(); ++k) {
        const auto& [option, out] = outputs[k];
        if (out.empty() || out == "-") continue;
        for (const std::string& in : inputs)
            if (same_file(in, out)) throw UsageError(option + " " + out + " is an input (" + in + "): writing it would destroy it");
        for (size_t j = 0; j < k; ++j)
            if (outputs[j].second != "-" && !outputs[j].second.empty() && same_file(outputs[j].second, out))
                throw UsageError(outputs[j].first + " and " + option + " both name " + out);
    }
}

// Who held each leak, beside the live trace that `analyze` and `report` read.
std::string owners_path(const std::string& trace) { return trace + ".owners.json"; }

// Who held each leak, written beside a live trace by the process that captured it; checked as
// JSON, as it goes into the report's data as written.
std::string owners_beside(const std::string& trace) {
    const std::string path = owners_path(trace);
    if (access(path.c_str(), R_OK) != 0) return "";
    const Bytes text = read_file(path, 256 << 20);
    std::string owners(text.data(), text.size());
    try {
        parse_json(owners, path, 0);
    } catch (const std::runtime_error& e) {
        std::cerr << "vramscope: warning: " << terminal_safe(e.what()) << " (the report leaves owners out)\n";
        return "";
    }
    return owners;
}

void write_report(const std::string& path, const std::vector<std::string>& files, const std::vector<Findings>& runs,
                  const RankComparison& ranks) {
    std::vector<std::string> owners;
    for (const std::string& f : files) owners.push_back(owners_beside(f));
    write_file(path, render_html(runs, ranks, owners), "report");
}

// `report FINDINGS.json... -o OUT.html`: the page around findings already made.
int report_from_findings(const std::vector<std::string>& files, const std::string& out, const ReadLimits& limits) {
    std::vector<std::string> texts;
    for (const std::string& f : files) {
        const Bytes b = read_file(f, std::min<uint64_t>(limits.max_decoded_bytes, 256 << 20));
        texts.emplace_back(b.data(), b.size());
    }
    write_file(out, report_page(report_data_from_findings(texts, files)), "report");
    write_stdout("wrote " + out + "\n");
    return 0;
}

int analyze_command(const std::vector<std::string>& args, bool report_only) {
    std::vector<std::string> files;
    std::string json_out, html_out;
    AnalysisOptions opt;
    ReadLimits limits;
    bool fail_on_leak = false, skip_empty = false;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        auto value = [&]() -> const std::string& { return option_value(args, i); };
        if (limit_option(args, i, limits)) continue;
        if (a == "--json" && !report_only) json_out = value();
        else if (a == "--html" || (report_only && (a == "-o" || a == "--output"))) html_out = value();
        else if (a == "--window") opt.window = uint32_t(whole_number(value(), 1, 1000, a));
        else if (a == "--warmup") opt.warmup_steps = int(whole_number(value(), 0, 1000000, a));
        else if (a == "--steps") parse_step_range(value(), opt);
        else if (a == "--device-memory") {
            if (!parse_bytes(value(), opt.device_memory) || opt.device_memory == 0)
                throw UsageError("--device-memory takes a size such as 80GiB or 81559MiB");
        } else if (a == "--fail-on-leak") fail_on_leak = true;
        else if (a == "--skip-empty") skip_empty = true;
        else if (a.starts_with("--")) throw UsageError("unknown option " + a);
        else files.push_back(a);
    }
    if (files.empty()) throw UsageError(std::string(report_only ? "report" : "analyze") + " needs at least one FILE");
    if (report_only && html_out.empty()) throw UsageError("report needs -o OUT.html");
    std::vector<std::string> inputs = files;
    for (const std::string& f : files) inputs.push_back(owners_path(f));
    refuse_overwriting(inputs, {{"--json", json_out}, {report_only ? "-o" : "--html", html_out}});
    size_t json_inputs = 0;
    for (const auto& f : files) json_inputs += f.ends_with(".json");
    if (report_only && json_inputs == files.size()) return report_from_findings(files, html_out, limits);
    if (json_inputs) throw UsageError("findings JSON goes to `report` alone, not mixed with traces");
    std::vector<Findings> runs;
    std::vector<std::string> kept;
    size_t skipped = 0;
    for (const auto& path : files) {
        Progress progress("reading " + path, file_size(path));
        Findings f = analyze_path(path, opt, limits);
        if (skip_empty && !f.allocated_any) {
            ++skipped;
            continue;
        }
        kept.push_back(path);
        runs.push_back(std::move(f));
    }
    files = std::move(kept);
    if (skipped)
        std::cerr << "vramscope: " << skipped << (skipped == 1 ? " process" : " processes")
                  << " never allocated CUDA memory (compile or data workers): not counted as runs\n";
    if (runs.empty()) throw std::runtime_error("no trace holds any memory event");
    const RankComparison ranks = compare_ranks(runs);
    if (!html_out.empty()) write_report(html_out, files, runs, ranks);
    if (report_only) {
        write_stdout("wrote " + html_out + "\n");
        return 0;
    }
    std::string out;
    if (json_out != "-") {
        for (const Findings& f : runs) out += (out.empty() ? "" : "\n") + render_summary(f, color_wanted());
        out += render_ranks(ranks, color_wanted());
    }
    if (!json_out.empty()) {
        const std::string json = to_json(runs, ranks);
        if (json_out == "-") out += json;
        else write_file(json_out, json, "findings JSON");
    }
    write_stdout(out);
    Verdict verdict = Verdict::no_leak;
    for (const Findings& f : runs) verdict = worse(verdict, f.verdict);
    if (!fail_on_leak || verdict == Verdict::no_leak) return 0;
    return verdict == Verdict::leak ? 1 : 2;  // 2: an input could not be judged
}

int export_command(const std::vector<std::string>& args) {
    std::string in, memory_viz, perfetto;
    ReadLimits limits;
    for (size_t i = 0; i < args.size(); ++i) {
        if (limit_option(args, i, limits)) continue;
        if (args[i] == "--memory-viz" || args[i] == "--perfetto") {
            std::string& out = args[i] == "--memory-viz" ? memory_viz : perfetto;
            out = option_value(args, i);
        }
        else if (args[i].starts_with("--")) throw UsageError("export: unknown option " + args[i]);
        else if (in.empty()) in = args[i];
        else throw UsageError("export takes one FILE");
    }
    if (in.empty() || (memory_viz.empty() && perfetto.empty()))
        throw UsageError("export needs a FILE and --memory-viz OUT.pickle and/or --perfetto OUT.json");
    refuse_overwriting({in}, {{"--memory-viz", memory_viz}, {"--perfetto", perfetto}});
    const Trace t = load(in, limits);
    require_trusted(t);
    if (!memory_viz.empty()) {
        write_file(memory_viz, to_memory_viz_pickle(t), "memory_viz pickle");
        write_stdout("wrote " + memory_viz + " (open it at https://pytorch.org/memory_viz)\n");
    }
    if (!perfetto.empty()) {
        write_file(perfetto, to_perfetto_json(t, analyze_input(t, {})), "Perfetto trace");
        write_stdout("wrote " + perfetto + " (open it at https://ui.perfetto.dev)\n");
    }
    return 0;
}

int convert_command(const std::vector<std::string>& args) {
    std::vector<std::string> paths;
    ReadLimits limits;
    uint64_t chunk_bytes = 64 << 10;
    for (size_t i = 0; i < args.size(); ++i) {
        if (limit_option(args, i, limits)) continue;
        if (args[i] == "--chunk-size") {
            if (!parse_bytes(option_value(args, i), chunk_bytes) || chunk_bytes == 0 || chunk_bytes > format::kMaxChunkPayload / 2)
                throw UsageError("--chunk-size takes a size from 1 to 8MiB");
            continue;
        }
        if (args[i].starts_with("--")) throw UsageError("convert: unknown option " + args[i]);
        paths.push_back(args[i]);
    }
    if (paths.size() != 2) throw UsageError("convert takes IN and OUT.vscope");
    refuse_overwriting({paths[0]}, {{"OUT", paths[1]}});
    const Trace t = load(paths[0], limits);
    require_trusted(t);
    for (const auto& w : t.warnings) std::cerr << "warning: " << terminal_safe(w) << "\n";
    replace_file(paths[1], "trace", [&](const std::string& out) { write_trace(t, out, size_t(chunk_bytes)); });
    write_stdout("wrote " + paths[1] + ": " + format_count(t.entry_count()) + " events\n");
    return 0;
}

// `compare-table RESULTS.json`: the table a compare run prints, and its other forms.
int compare_table_command(const std::vector<std::string>& args) {
    std::string results, markdown, json, html;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        auto value = [&]() -> const std::string& { return option_value(args, i); };
        if (a == "--markdown") markdown = value();
        else if (a == "--json") json = value();
        else if (a == "--html") html = value();
        else if (!a.empty() && a[0] == '-') throw UsageError("compare-table: unknown option " + a);
        else if (results.empty()) results = a;
        else throw UsageError("compare-table takes one compare.json");
    }
    if (results.empty()) throw UsageError("compare-table needs the compare.json of a compare run");
    const CompareRun run = read_compare(results);
    std::vector<std::string> inputs{results};
    for (const CellResult& c : run.cells)
        if (!c.findings_file.empty()) inputs.push_back(c.findings_file);
    refuse_overwriting(inputs, {{"--markdown", markdown}, {"--json", json}, {"--html", html}});
    if (!markdown.empty()) write_file(markdown, render_compare_markdown(run), "Markdown table");
    if (!json.empty()) write_file(json, render_compare_json(run), "table JSON");
    if (!html.empty()) write_file(html, render_compare_html(run), "table page");
    write_stdout(render_compare_terminal(run));
    for (const auto& [path, what] : {std::pair{markdown, "Markdown"}, {html, "page"}, {json, "JSON"}})
        if (!path.empty()) write_stdout(std::string(what) + ": " + path + "\n");
    return 0;
}

}  // namespace

int run_cli(const std::vector<std::string>& args) {
    try {
        if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
            std::cout << kUsage;
            return args.empty() ? 2 : 0;
        }
        const std::vector<std::string> rest(args.begin() + 1, args.end());
        if (args[0] == "analyze") return analyze_command(rest, false);
        if (args[0] == "report") return analyze_command(rest, true);
        if (args[0] == "convert") return convert_command(rest);
        if (args[0] == "export") return export_command(rest);
        if (args[0] == "compare-table") return compare_table_command(rest);
        if (args[0] == "version") {
            std::cout << "vramscope " VRAMSCOPE_VERSION "\n";
            return 0;
        }
        throw UsageError("unknown command '" + args[0] + "'");
    } catch (const UsageError& e) {
        std::cout.flush();
        std::cerr << "vramscope: " << e.what() << "\n\n" << kUsage;
        return 2;
    } catch (const std::bad_alloc&) {
        std::cerr << "vramscope: error: out of memory\n";
        return 2;
    } catch (const std::exception& e) {
        std::cout.flush();
        std::cerr << "vramscope: error: " << terminal_safe(e.what(), true) << "\n";
        return 2;
    }
}

}  // namespace vramscope
