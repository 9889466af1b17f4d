// A `vramscope compare` run as its runner left it (OUT/compare.json, written by
// python/vramscope/compare) with each cell's findings read: what the statuses and the table use.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "findings/vocabulary.h"

namespace vramscope {

// How a cell's process ended (the runner spells these; anything else is an error).
// error: vramscope itself failed on the cell (its reason says how); the others are how its process ended.
enum class CellOutcome : uint8_t { finished, failed, out_of_memory, timed_out, not_run, interrupted, error };
std::string_view name(CellOutcome o);

struct CellLeak {
    std::string site;      // "train.py:42 forward", as people say it
    std::string site_key;  // file (in the user's tree, not the cell's copy) and function: the same code across cells
    bool side_stream = false;
    double bytes_per_step = 0;
    int64_t first_step = 0;
    std::string owner;  // the first owner path, "" when none was found
};

struct CellResult {
    std::string mode, variant;
    CellOutcome outcome = CellOutcome::not_run;
    std::optional<int64_t> exit_code;
    double wall_seconds = 0;
    std::string reason;                  // why it did not run or was not analysed (its findings unreadable)
    std::string findings_file;           // the findings read, or tried: an input of the table
    bool analysed = false;               // findings were read
    Verdict verdict = Verdict::cannot_judge;
    double leak_bytes_per_step = 0;      // the largest over its processes (ranks)
    uint64_t peak_allocated = 0, peak_reserved = 0;
    bool host_memory_only = false;       // live tensors on the host: no allocator reserves anything
    std::array<uint64_t, kPeakCategories> peak_categories{};  // of its highest device peak (findings' peak[]), by PeakCategory
    int64_t steps = 0;                   // steps judged in the trace
    std::optional<int64_t> oom_step, projected_oom_step, growth_start_step;
    std::vector<CellLeak> leaks;         // largest first
    std::string report, log;             // relative to compare.json
};

struct CompareRow {
    std::string name, label;
    std::vector<std::string> changes;
};

struct CompareRun {
    std::vector<std::string> command;
    int64_t step_limit = 0;
    double wall_seconds = 0;
    bool complete = true;
    std::vector<std::string> modes;
    std::vector<CompareRow> rows;   // baseline first
    std::vector<CellResult> cells;  // mode by mode, rows in order
    std::unordered_map<std::string, size_t> cell_index;  // "MODE\0ROW" -> its cell (read_compare fills it)
    const CellResult* cell(std::string_view mode, std::string_view row) const;
};

// Throws std::runtime_error naming compare.json and what is wrong with it. A cell whose findings
// cannot be read (missing, not findings, a number that is not finite or out of range) is not
// analysed, its reason the error: the table still shows the other cells.
CompareRun read_compare(const std::string& path);

}  // namespace vramscope
