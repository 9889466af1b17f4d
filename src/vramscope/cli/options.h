// Every option of the command line, once: its names, its help and the one rule that turns its text
// into a typed value. The binary's parser (cli.cpp) and Python's registry
// (python/vramscope/commands/) both walk argv their own way and hand each option here.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/analyze.h"
#include "common/limits.h"

namespace vramscope {

// What the user typed wrong: the message, then a one-line hint, never the whole help.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// What the options of any command set, typed.
struct CommandOptions {
    AnalysisOptions analysis;
    std::string analysis_option;  // the first of --window, --warmup, --steps given: findings JSON refuses them
    ReadLimits limits;
    std::string json, html, markdown, memory_viz, perfetto;  // outputs, "" when not asked for
    uint64_t chunk_bytes = 64 << 10;
    bool fail_on_leak = false;
    bool skip_empty = false;
};

struct Option {
    std::string name;   // "--window"
    std::string alias;  // "-o", or ""
    std::string value;  // its metavariable ("W"); "" for a flag
    std::string help;
    void (*apply)(CommandOptions&, const std::string& value);
};

struct Command {
    std::string name;
    std::string inputs;   // "FILE..." as the usage line shows them
    size_t min_inputs = 0, max_inputs = 0;
    std::string summary;  // what it does, a sentence or two
    std::vector<std::string> options;  // the names of the options it takes (Option::name)
    std::vector<std::string> required = {};  // of those, the ones it cannot run without
};

// The commands of the core, the one list both command lines show: analyze, report, export,
// convert, compare-table (Python adds run, compare and demo, which need the interpreter).
const std::vector<Command>& commands();
const std::vector<Option>& options();
// The command named so; a UsageError naming the known ones otherwise.
const Command& command(std::string_view name);
// The option named so (either of its names) if `command` takes it, else a UsageError.
const Option& option_of(const Command& command, std::string_view name);
// Applies one option's text: a UsageError naming the option when the text is not what it takes.
void apply_option(const Command& command, CommandOptions& into, std::string_view name, const std::string& value);
// A size such as 80GiB: the unit required, as a bare number of bytes is almost always a slip
// (--device-memory 80 meant 80 GiB). A UsageError naming `option` otherwise.
uint64_t size_with_unit(const std::string& text, const std::string& option, uint64_t min, uint64_t max);

// The usage of one command (its inputs and options), or of all of them for `program`.
std::string command_usage(const Command& command, std::string_view program);
std::string usage(std::string_view program);

}  // namespace vramscope
