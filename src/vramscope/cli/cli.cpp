#include "cli/cli.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <stdexcept>
#include <thread>

#include "analysis/analyze.h"
#include "analysis/ranks.h"
#include "common/deflate.h"
#include "common/file.h"
#include "common/format.h"
#include "common/progress.h"
#include "compare/cells.h"
#include "compare/diff.h"
#include "compare/table.h"
#include "findings/json.h"
#include "findings/json_reader.h"
#include "importers/torch_snapshot.h"
#include "render/export.h"
#include "render/html.h"
#include "render/terminal.h"
#include "trace/writer.h"

namespace vramscope {
namespace {

bool color_wanted() { return isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR"); }

// Reading and analysing one input; running out of memory names the file.
Trace load(const std::string& path, const ReadLimits& limits) {
    try {
        return load_any(path, limits);
    } catch (const std::bad_alloc&) {
        throw std::runtime_error(path + ": out of memory while reading it (--max-memory bounds what reading holds)");
    }
}
// A conversion or export would drop the faults and pass the content on as if it were sound; one
// of an input without a memory event (an empty snapshot, one of segments only) would write a file
// that says nothing, and exit 0 as if it had.
void require_trusted(const Trace& t) {
    if (t.faults.empty()) {
        if (std::any_of(t.events.begin(), t.events.end(), [](const Event& e) { return is_memory_event(e.kind); })) return;
        throw std::runtime_error(t.source + ": holds no memory events (an empty snapshot, or its segments alone): "
                                 "nothing to pass on. Record its history with "
                                 "torch.cuda.memory._record_memory_history(max_entries=1000000) before the loop");
    }
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

// Several inputs (a run's ranks, compare's cells) analysed side by side on the machine's cores, each
// in its own bounded memory, the findings in the inputs' order. The first input's reading shows
// the progress line; the first failure, by the inputs' order, is the one reported.
std::vector<Findings> analyze_paths(const std::vector<std::string>& paths, const AnalysisOptions& opt,
                                    const ReadLimits& limits) {
    std::vector<Findings> found(paths.size());
    std::vector<std::exception_ptr> failed(paths.size());
    Progress progress("reading " + (paths.size() == 1 ? paths[0] : paths[0] + " and " + format_count(paths.size() - 1) +
                                                                       " more"),
                      paths.empty() ? 0 : file_size(paths[0]));
    const auto analyse = [&](size_t k) {
        try {
            found[k] = analyze_path(paths[k], opt, limits);
        } catch (...) {
            failed[k] = std::current_exception();
        }
    };
    std::atomic<size_t> next{1};  // the first is this thread's, whose reports the line follows
    const auto take_the_rest = [&] {
        const Progress::Reports silent(false);
        for (size_t k; (k = next.fetch_add(1)) < paths.size();) analyse(k);
    };
    const size_t workers = std::min<size_t>(paths.size(), std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> others;
    for (size_t w = 1; w < workers; ++w) others.emplace_back(take_the_rest);
    if (!paths.empty()) analyse(0);
    take_the_rest();
    for (std::thread& t : others) t.join();
    for (const std::exception_ptr& e : failed)
        if (e) std::rethrow_exception(e);
    return found;
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

// The owners the capturing process wrote beside its trace, joined to the leaks; a damaged file
// is a warning and the findings go on without owners.
void join_owners_beside(Findings& f, const std::string& trace) {
    const std::string path = owners_path(trace);
    if (access(path.c_str(), R_OK) != 0) return;
    try {
        const Bytes text = read_file(path, 256 << 20);
        attach_owners(f, view(text), path);
    } catch (const std::runtime_error& e) {
        std::cerr << "vramscope: warning: " << terminal_safe(e.what()) << " (the report leaves owners out)\n";
    }
}

// "Who holds it": each leak of a run whose process found owners, as the joined findings say.
std::string render_owners(const Findings& f, const std::string& label) {
    if (std::none_of(f.leaks.begin(), f.leaks.end(), [](const SiteFinding& l) { return !l.owners.empty(); })) return "";
    std::string out = "\nWho holds it" + label + "\n";
    for (const SiteFinding& l : f.leaks) {
        out += "  " + terminal_safe(base_name(l.site.file) + ":" + std::to_string(l.site.line) + " " + l.site.function) +
               "  (+" + format_bytes(l.bytes_per_step) + "/step" +
               (l.owners_found_at_step ? ", found at step " + format_count(*l.owners_found_at_step) : "") + ")\n";
        if (l.owners.empty()) out += "    no owner found from Python (freed since, or held by C++ state)\n";
        for (const Owner& o : l.owners) out += "    " + terminal_safe(owner_line(o)) + "\n";
    }
    return out;
}

// An output the options name: "-" is stdout.
void write_output(const std::string& path, const std::string& text, const char* what) {
    if (path == "-") write_stdout(text);
    else write_file(path, text, what);
}

bool is_findings_json(const std::string& path) { return path.ends_with(".json"); }

}  // namespace

Analysis analyze_inputs(const std::vector<std::string>& files, const CommandOptions& options) {
    Analysis a;
    a.limits = options.limits;
    std::vector<Findings> analysed = analyze_paths(files, options.analysis, options.limits);
    for (size_t k = 0; k < files.size(); ++k) {
        Findings& f = analysed[k];
        if (options.skip_empty && !f.allocated_any) {
            ++a.skipped;
            continue;
        }
        join_owners_beside(f, files[k]);
        a.files.push_back(files[k]);
        a.runs.push_back(std::move(f));
    }
    if (a.runs.empty()) throw std::runtime_error("no trace holds any memory event");
    a.ranks = compare_ranks(a.runs);
    return a;
}

Analysis read_findings_files(const std::vector<std::string>& files, const ReadLimits& limits) {
    Analysis a;
    a.limits = limits;
    for (const std::string& path : files) {
        const Bytes text = read_file(path, std::min<uint64_t>(limits.max_decoded_bytes, 256 << 20));
        FindingsFile file = read_findings(view(text), path, limits);
        if (a.ranks.rows.empty()) a.ranks = std::move(file.ranks);
        for (Findings& f : file.runs) {
            a.files.push_back(path);
            a.runs.push_back(std::move(f));
        }
    }
    return a;
}

std::string render_terminal(const Analysis& a, bool color) {
    std::string out;
    for (const Findings& f : a.runs) out += (out.empty() ? "" : "\n") + render_summary(f, color);
    out += render_ranks(a.ranks, color);
    for (size_t r = 0; r < a.runs.size(); ++r)
        out += render_owners(a.runs[r], a.runs.size() > 1 ? " (" + terminal_safe(base_name(a.files[r])) + ")" : "");
    return out;
}

std::string render_report(const Analysis& a) { return render_html(a.runs, a.ranks); }

std::string findings_json(const Analysis& a) { return to_json(a.runs, a.ranks, a.limits.max_held_bytes); }

int exit_code(const Analysis& a, bool fail_on_leak) {
    Verdict verdict = Verdict::no_leak;
    for (const Findings& f : a.runs) verdict = worse(verdict, f.verdict);
    if (!fail_on_leak || verdict == Verdict::no_leak) return 0;
    return verdict == Verdict::leak ? 1 : 2;  // 2: an input could not be judged
}

std::string write_outputs(const Analysis& a, const CommandOptions& options, bool color) {
    if (!options.html.empty()) write_output(options.html, render_report(a), "report");
    if (!options.json.empty()) write_output(options.json, findings_json(a), "findings JSON");
    return options.json == "-" ? "" : render_terminal(a, color);
}

std::string convert(const std::string& in, const std::string& out, const CommandOptions& options) {
    refuse_overwriting({in}, {{"OUT", out}});
    const Trace t = load(in, options.limits);
    require_trusted(t);
    for (const auto& w : t.warnings) std::cerr << "warning: " << terminal_safe(w) << "\n";
    replace_file(out, "trace", [&](const std::string& path) { write_trace(t, path, size_t(options.chunk_bytes)); });
    return "wrote " + out + ": " + format_count(t.entry_count()) + " events\n";
}

std::string export_trace(const std::string& in, const CommandOptions& options) {
    if (options.memory_viz.empty() && options.perfetto.empty())
        throw UsageError("export needs --memory-viz OUT.pickle and/or --perfetto OUT.json");
    refuse_overwriting({in}, {{"--memory-viz", options.memory_viz}, {"--perfetto", options.perfetto}});
    const Trace t = load(in, options.limits);
    require_trusted(t);
    std::string said;
    if (!options.memory_viz.empty()) {
        const bool gzipped = names_gzip(options.memory_viz);
        const std::string pickle = to_memory_viz_pickle(t);
        write_file(options.memory_viz, gzipped ? gzip_compress(pickle) : pickle, "memory_viz pickle");
        said += "wrote " + options.memory_viz +
                (gzipped ? " (gunzip it, then open it at https://pytorch.org/memory_viz)\n"
                         : " (open it at https://pytorch.org/memory_viz)\n");
    }
    if (!options.perfetto.empty()) {
        write_file(options.perfetto, to_perfetto_json(t, analyze_input(t, {})), "Perfetto trace");
        said += "wrote " + options.perfetto + " (open it at https://ui.perfetto.dev)\n";
    }
    return said;
}

std::string compare_table(const std::string& results, const CommandOptions& options) {
    const CompareRun run = read_compare(results);
    std::vector<std::string> inputs{results};
    for (const CellResult& c : run.cells)
        if (!c.findings_file.empty()) inputs.push_back(c.findings_file);
    refuse_overwriting(inputs, {{"--markdown", options.markdown}, {"--json", options.json}, {"--html", options.html}});
    if (!options.markdown.empty()) write_output(options.markdown, render_compare_markdown(run), "Markdown table");
    if (!options.json.empty()) write_output(options.json, render_compare_json(run), "table JSON");
    if (!options.html.empty()) write_output(options.html, render_compare_html(run), "table page");
    if (options.json == "-") return "";
    std::string said = render_compare_terminal(run);
    for (const auto& [path, what] : {std::pair{options.markdown, "Markdown"}, {options.html, "page"}, {options.json, "JSON"}})
        if (!path.empty() && path != "-") said += std::string(what) + ": " + path + "\n";
    return said;
}

Analysis findings_of(const std::string& input, const CommandOptions& options) {
    return is_findings_json(input) ? read_findings_files({input}, options.limits) : analyze_inputs({input}, options);
}

RunDiff diff_inputs(const std::string& a, const std::string& b, const CommandOptions& options) {
    std::vector<Findings> runs;
    for (const std::string& input : {a, b}) {
        Analysis one = findings_of(input, options);
        if (one.runs.size() != 1)
            throw std::runtime_error(input + ": holds " + std::to_string(one.runs.size()) + " runs; diff takes one run a side");
        runs.push_back(std::move(one.runs.front()));
    }
    return diff_runs(runs[0], runs[1]);
}

std::string diff(const std::string& a, const std::string& b, const CommandOptions& options) {
    refuse_overwriting({a, b}, {{"--json", options.json}, {"--html", options.html}});
    const RunDiff d = diff_inputs(a, b, options);
    if (!options.json.empty()) write_output(options.json, render_diff_json(d), "diff JSON");
    if (!options.html.empty()) write_output(options.html, render_diff_html(d), "diff page");
    if (options.json == "-") return "";
    std::string said = render_diff_terminal(d, color_wanted());
    for (const auto& [path, what] : {std::pair{options.html, "page"}, {options.json, "JSON"}})
        if (!path.empty() && path != "-") said += std::string(what) + ": " + path + "\n";
    return said;
}

// analyze and report: traces analysed, or (report) findings JSON read back.
int analyze_command(const Command& c, const std::vector<std::string>& files, const CommandOptions& options) {
    const bool report = c.name == "report";
    if (report && options.html.empty()) throw UsageError("report needs -o OUT.html");
    std::vector<std::string> inputs = files;
    for (const std::string& f : files) inputs.push_back(owners_path(f));
    refuse_overwriting(inputs, {{"--json", options.json}, {report ? "-o" : "--html", options.html}});
    const size_t json_inputs = size_t(std::count_if(files.begin(), files.end(), is_findings_json));
    if (json_inputs && !report && json_inputs == files.size())
        throw UsageError(c.name + " takes traces and snapshots, not JSON (" + terminal_safe(*std::find_if(files.begin(), files.end(), is_findings_json)) +
                         "); findings JSON is drawn by `vramscope report FILE -o page.html`");
    if (json_inputs && json_inputs != files.size())
        throw UsageError("findings JSON goes to `report` alone, not mixed with traces");
    if (json_inputs && !options.analysis_option.empty())
        throw UsageError(options.analysis_option + " judges a trace; findings JSON was judged already");
    const Analysis a = json_inputs ? read_findings_files(files, options.limits) : analyze_inputs(files, options);
    if (a.skipped)
        std::cerr << "vramscope: " << a.skipped << (a.skipped == 1 ? " process" : " processes")
                  << " never allocated CUDA memory (compile or data workers): not counted as runs\n";
    const std::string text = write_outputs(a, options, color_wanted());
    write_stdout(report ? "wrote " + options.html + "\n" : text);
    return exit_code(a, options.fail_on_leak);
}

int run_command(const Command& c, const std::vector<std::string>& inputs, const CommandOptions& options) {
    if (inputs.size() < c.min_inputs || inputs.size() > c.max_inputs) throw UsageError(c.name + " takes " + c.inputs);
    try {
        if (c.name == "analyze" || c.name == "report") return analyze_command(c, inputs, options);
        if (c.name == "convert") write_stdout(convert(inputs[0], inputs[1], options));
        else if (c.name == "export") write_stdout(export_trace(inputs[0], options));
        else if (c.name == "compare-table") write_stdout(compare_table(inputs[0], options));
        else if (c.name == "diff") write_stdout(diff(inputs[0], inputs[1], options));
        return 0;
    } catch (const UsageError&) {
        throw;
    } catch (const StdoutClosed&) {
        return 0;  // the reader has what it wanted
    } catch (const std::bad_alloc&) {
        std::cerr << "vramscope: error: out of memory\n";
    } catch (const std::exception& e) {
        std::cout.flush();
        std::cerr << "vramscope: error: " << terminal_safe(e.what(), true) << "\n";
    }
    return 2;
}

int run_cli(const std::vector<std::string>& args) {
    constexpr const char* kProgram = "vramscope-core";
    std::string hint = std::string("Try '") + kProgram + " --help'.";
    try {
        if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
            std::cout << usage(kProgram);
            return args.empty() ? 2 : 0;
        }
        if (args[0] == "--version" || args[0] == "-V" || args[0] == "version") {
            std::cout << "vramscope " VRAMSCOPE_VERSION "\n";
            return 0;
        }
        const Command& c = command(args[0]);
        hint = std::string("Try '") + kProgram + " " + c.name + " --help'.";
        std::vector<std::string> inputs;
        CommandOptions options;
        for (size_t i = 1; i < args.size(); ++i) {
            const std::string& a = args[i];
            if (a == "-h" || a == "--help") {
                std::cout << command_usage(c, kProgram);
                return 0;
            }
            if (a == "--") {
                inputs.insert(inputs.end(), args.begin() + long(i) + 1, args.end());
                break;
            }
            if (a.size() < 2 || a[0] != '-') {
                inputs.push_back(a);
                continue;
            }
            const Option& o = option_of(c, a);
            if (!o.value.empty() && i + 1 >= args.size()) throw UsageError(a + " needs a value");
            apply_option(c, options, a, o.value.empty() ? std::string() : args[++i]);
        }
        return run_command(c, inputs, options);
    } catch (const UsageError& e) {
        std::cout.flush();
        std::cerr << "vramscope: " << terminal_safe(e.what()) << "\n" << hint << "\n";
        return 2;
    }
}

}  // namespace vramscope
