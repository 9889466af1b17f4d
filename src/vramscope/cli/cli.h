// The commands as typed functions: options (cli/options.h) in, findings, text and files out. The
// standalone binary (run_cli) and Python (src/python/module.cpp, python/vramscope/commands/) call
// these; neither hands the other text to parse again.
#pragma once
#include <string>
#include <vector>

#include "cli/options.h"
#include "compare/diff.h"
#include "findings/findings.h"

namespace vramscope {

// Inputs judged together: each one's findings (owners joined where its process found them) and
// the ranks side by side.
struct Analysis {
    std::vector<std::string> files;  // the inputs kept, one per run
    std::vector<Findings> runs;
    RankComparison ranks;
    size_t skipped = 0;  // processes that never allocated, left out under skip_empty
    ReadLimits limits;   // what reading them was held to: writing them out is held to it too
};

// Traces and snapshots analysed, each joined to the owners beside it (TRACE.owners.json).
Analysis analyze_inputs(const std::vector<std::string>& files, const CommandOptions& options);
// Findings JSON files read back (report FINDINGS.json), through the one findings reader.
Analysis read_findings_files(const std::vector<std::string>& files, const ReadLimits& limits);
// One input's findings, whatever it is: a findings JSON (*.json) read back, else a trace or
// snapshot analysed with its owners joined (diff's sides, the MCP server's tools).
Analysis findings_of(const std::string& input, const CommandOptions& options);
// The terminal's text: each run's summary, the ranks, who holds each leak.
std::string render_terminal(const Analysis& analysis, bool color);
// The report page, whole.
std::string render_report(const Analysis& analysis);
// The findings JSON (one run, or {"runs", "ranks"}).
std::string findings_json(const Analysis& analysis);
// 0; under fail_on_leak, 1 for a leak and 2 for an input that could not be judged.
int exit_code(const Analysis& analysis, bool fail_on_leak);
// Writes the outputs the options name ("-": stdout) after checking none is an input; returns
// the terminal's text (empty when the JSON went to stdout).
std::string write_outputs(const Analysis& analysis, const CommandOptions& options, bool color);

// The other commands; each returns what it prints.
std::string convert(const std::string& in, const std::string& out, const CommandOptions& options);
std::string export_trace(const std::string& in, const CommandOptions& options);
std::string compare_table(const std::string& results, const CommandOptions& options);
// Two runs side by side: each a trace, a snapshot or a findings file of one run.
RunDiff diff_inputs(const std::string& a, const std::string& b, const CommandOptions& options);
std::string diff(const std::string& a, const std::string& b, const CommandOptions& options);

// A command of cli/options.h with its inputs and options: what it prints goes to stdout, its
// exit code is returned; an error is said on stderr (exit code 2), a UsageError thrown to the
// parser that read what the user typed.
int run_command(const Command& command, const std::vector<std::string>& inputs, const CommandOptions& options);

// The standalone binary: args excludes the program name. Returns the process exit code: 0 ok,
// 1 leak under --fail-on-leak, 2 usage or input error.
int run_cli(const std::vector<std::string>& args);

}  // namespace vramscope
