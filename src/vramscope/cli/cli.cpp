#include "cli/cli.h"

#include <unistd.h>

#include <algorithm>
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
#include "findings/json.h"
#include "importers/torch_snapshot.h"
#include "render/export.h"
#include "render/html.h"
#include "render/terminal.h"
#include "trace/writer.h"

namespace vramscope {
namespace {

constexpr const char* kUsage = R"(usage: vramscope COMMAND ...

  analyze FILE... [--json OUT] [--html OUT] [--window W] [--warmup N] [--device-memory SIZE] [--fail-on-leak]
        Decide whether memory leaks, where, and how fast. FILE: a .vscope trace or a torch
        memory snapshot (torch.cuda.memory._dump_snapshot; .pickle or .pickle.gz).
        --json OUT        also write the findings as JSON (- for stdout, no summary)
        --html OUT        also write the report page (what `report` writes)
        --window W        an allocation survives if still live W steps later (default 1)
        --warmup N        steps not judged at the start (default 3, as the live monitor)
        --device-memory   GPU capacity for the OOM projection, e.g. 80GiB (default: from trace)
        --fail-on-leak    exit 1 when a leak is found, 2 when the input cannot be judged (for CI)
  run [-o OUT] [--fail-on-leak] -- COMMAND...
        Run a training command with live capture (no code change); see `vramscope run --help`.
  report FILE... -o OUT.html [--window W] [--warmup N] [--device-memory SIZE]
        One self-contained HTML page (opens offline): verdict, memory per step with the leaked
        part by site, the leak table with stacks and owners, what is not a leak, streams, ranks.
  export FILE [--memory-viz OUT.pickle] [--perfetto OUT.json]
        For your other tools: a torch snapshot pickle for https://pytorch.org/memory_viz, and a
        trace-event JSON for https://ui.perfetto.dev (memory counters, steps, leak starts).
  convert IN OUT.vscope   Convert a torch snapshot to the compact .vscope trace format.
  demo                    Analyse a bundled real trace of a leaking training run.
  version                 Print the version.
)";

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

bool color_wanted() { return isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR"); }

// Who held each leak, written beside a live trace by the process that captured it.
std::string owners_beside(const std::string& trace) {
    const std::string path = trace + ".owners.json";
    if (access(path.c_str(), R_OK) != 0) return "";
    const Bytes text = read_file(path);
    return std::string(text.data(), text.size());
}

void write_text(const std::string& path, const std::string& text, const char* what) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out) throw std::runtime_error(path + ": cannot write the " + what);
}

void write_report(const std::string& path, const std::vector<std::string>& files, const std::vector<Findings>& runs,
                  const RankComparison& ranks) {
    std::vector<std::string> owners;
    for (const std::string& f : files) owners.push_back(owners_beside(f));
    write_text(path, render_html(runs, ranks, owners), "report");
}

int analyze_command(const std::vector<std::string>& args, bool report_only) {
    std::vector<std::string> files;
    std::string json_out, html_out;
    AnalysisOptions opt;
    bool fail_on_leak = false, skip_empty = false;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        auto value = [&]() -> const std::string& {
            if (i + 1 >= args.size()) throw UsageError(a + " needs a value");
            return args[++i];
        };
        if (a == "--json" && !report_only) json_out = value();
        else if (a == "--html" || (report_only && (a == "-o" || a == "--output"))) html_out = value();
        else if (a == "--window") {
            const std::string& v = value();
            char* end = nullptr;
            long w = std::strtol(v.c_str(), &end, 10);
            if (*end || w < 1 || w > 1000) throw UsageError("--window takes a whole number of steps from 1 to 1000");
            opt.window = uint32_t(w);
        } else if (a == "--warmup") {
            const std::string& v = value();
            char* end = nullptr;
            long n = std::strtol(v.c_str(), &end, 10);
            if (*end || n < 0) throw UsageError("--warmup takes a whole number of steps");
            opt.warmup_steps = int(n);
        } else if (a == "--device-memory") {
            if (!parse_bytes(value(), opt.device_memory) || opt.device_memory == 0)
                throw UsageError("--device-memory takes a size such as 80GiB or 81559MiB");
        } else if (a == "--fail-on-leak") fail_on_leak = true;
        else if (a == "--skip-empty") skip_empty = true;
        else if (a.starts_with("--")) throw UsageError("unknown option " + a);
        else files.push_back(a);
    }
    if (files.empty()) throw UsageError(std::string(report_only ? "report" : "analyze") + " needs at least one FILE");
    if (report_only && html_out.empty()) throw UsageError("report needs -o OUT.html");
    std::vector<Findings> runs;
    std::vector<std::string> kept;
    size_t skipped = 0;
    for (const auto& path : files) {
        const auto started = std::chrono::steady_clock::now();
        Progress progress("reading " + path, file_size(path));
        Trace trace = load_any(path);
        const double import_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        if (skip_empty && std::none_of(trace.events.begin(), trace.events.end(),
                                       [](const Event& e) { return is_block_event(e.kind); })) {
            ++skipped;
            continue;
        }
        kept.push_back(path);
        runs.push_back(analyze(trace, opt));
        runs.back().import_seconds = import_seconds;
    }
    files = std::move(kept);
    if (skipped)
        std::cerr << "vramscope: " << skipped << (skipped == 1 ? " process" : " processes")
                  << " never allocated CUDA memory (compile or data workers): not counted as runs\n";
    if (runs.empty()) throw std::runtime_error("no trace holds any memory event");
    const RankComparison ranks = compare_ranks(runs);
    if (!html_out.empty()) write_report(html_out, files, runs, ranks);
    if (report_only) {
        std::cout << "wrote " << html_out << "\n";
        return 0;
    }
    if (json_out != "-") {
        bool first = true;
        for (const Findings& f : runs) {
            if (!first) std::cout << "\n";
            first = false;
            std::cout << render_summary(f, color_wanted());
        }
    }
    if (json_out != "-") std::cout << render_ranks(ranks, color_wanted());
    if (!json_out.empty()) {
        const std::string json = to_json(runs, ranks);
        if (json_out == "-") std::cout << json;
        else write_text(json_out, json, "findings JSON");
    }
    std::cout.flush();
    Verdict verdict = Verdict::no_leak;
    for (const Findings& f : runs) verdict = worse(verdict, f.verdict);
    if (!fail_on_leak || verdict == Verdict::no_leak) return 0;
    return verdict == Verdict::leak ? 1 : 2;  // 2: the input could not be judged
}

int export_command(const std::vector<std::string>& args) {
    std::string in, memory_viz, perfetto;
    for (size_t i = 0; i < args.size(); ++i) {
        if ((args[i] == "--memory-viz" || args[i] == "--perfetto") && i + 1 < args.size()) {
            std::string& out = args[i] == "--memory-viz" ? memory_viz : perfetto;
            out = args[++i];
        }
        else if (args[i].starts_with("--")) throw UsageError("export: unknown or incomplete option " + args[i]);
        else if (in.empty()) in = args[i];
        else throw UsageError("export takes one FILE");
    }
    if (in.empty() || (memory_viz.empty() && perfetto.empty()))
        throw UsageError("export needs a FILE and --memory-viz OUT.pickle and/or --perfetto OUT.json");
    const Trace t = load_any(in);
    if (!memory_viz.empty()) {
        write_text(memory_viz, to_memory_viz_pickle(t), "memory_viz pickle");
        std::cout << "wrote " << memory_viz << " (open it at https://pytorch.org/memory_viz)\n";
    }
    if (!perfetto.empty()) {
        write_text(perfetto, to_perfetto_json(t, analyze(t)), "Perfetto trace");
        std::cout << "wrote " << perfetto << " (open it at https://ui.perfetto.dev)\n";
    }
    return 0;
}

int convert_command(const std::vector<std::string>& args) {
    if (args.size() != 2) throw UsageError("convert takes IN and OUT.vscope");
    Trace t = load_any(args[0]);
    for (const auto& w : t.warnings) std::cerr << "warning: " << w << "\n";
    write_trace(t, args[1]);
    std::cout << "wrote " << args[1] << ": " << format_count(t.entry_count()) << " events\n";
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
        if (args[0] == "version") {
            std::cout << "vramscope " VRAMSCOPE_VERSION "\n";
            return 0;
        }
        throw UsageError("unknown command '" + args[0] + "'");
    } catch (const UsageError& e) {
        std::cout.flush();
        std::cerr << "vramscope: " << e.what() << "\n\n" << kUsage;
        return 2;
    } catch (const std::exception& e) {
        std::cout.flush();
        std::cerr << "vramscope: error: " << e.what() << "\n";
        return 2;
    }
}

}  // namespace vramscope
