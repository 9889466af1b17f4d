// What analysis concludes about one trace: the contract every consumer reads (terminal, JSON,
// HTML, assert, compare). docs/findings.md documents its JSON form; bump kSchemaVersion on change.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vramscope {

inline constexpr int kSchemaVersion = 1;

struct SourceLine {
    std::string file;
    uint32_t line = 0;
    std::string function;
};

struct StepPoint {
    uint64_t allocated = 0;       // at the step's end
    uint64_t reserved = 0;        // at the step's end
    uint64_t peak_allocated = 0;  // highest inside the step
    uint64_t pending_free = 0;    // freed by the program, not yet by the allocator (other streams)
    // Live bytes the trace saw allocated, by CUDA stream handle (blocks from before the trace
    // began are in `allocated` only).
    std::vector<std::pair<uint64_t, uint64_t>> by_stream;
};

struct StreamUsage {
    uint64_t stream = 0;
    uint64_t allocated_at_end = 0;  // live bytes allocated on it, at the last step's end
    uint64_t leaked_bytes = 0;      // of those, held by leak sites
};

struct DeviceSummary {
    uint16_t device = 0;
    uint64_t total_memory = 0;              // 0: unknown
    std::string capacity_source;            // "trace", "--device-memory", "oom-event" (free + reserved then)
    std::vector<StepPoint> timeline;        // one per step (the unfinished tail included, last)
    std::vector<StreamUsage> streams;
    std::optional<uint64_t> projected_oom_step;
    std::optional<uint64_t> oom_step;       // the trace holds an OOM event in this step
};

// An allocation site judged to leak.
struct SiteFinding {
    SourceLine site;
    std::vector<SourceLine> stack;   // innermost first; the most common full stack at this site
    uint16_t device = 0;
    uint64_t stream = 0;             // where most of its surviving bytes were allocated
    double bytes_per_step = 0;       // fitted slope of its live bytes over the judged steps
    double fit_r2 = 0;
    uint64_t first_step = 0;         // first step whose allocations here outlived the window
    uint64_t live_bytes = 0;         // held at the last step's end
    uint64_t peak_bytes = 0;         // most it held at any step's end
    std::vector<uint64_t> held;      // bytes it held at each full step's end (the report's stacked area)
    uint64_t surviving_allocations = 0;
    double recurrence = 0;           // share of judged steps that left survivors here
    double share_of_growth = 0;      // of the device's allocated growth over the judged steps
    double confidence = 0;           // 0..1
    // Blocks still live at the end (address, size): what `explain` maps to tensors.
    std::vector<std::pair<uint64_t, uint64_t>> live_blocks;
};

struct NotLeak {
    std::string kind;   // "warm-up", "bounded-cache", "fragmentation", "cached-free", "activation-peaks"
    uint64_t bytes = 0;
    std::string why;
    std::optional<SourceLine> site;
    uint16_t device = 0;
};

struct Findings {
    std::string source;
    std::string format;
    std::string verdict;            // "leak" | "no-leak"
    uint64_t event_count = 0;       // counted as torch does: a `free` is two (requested, completed)
    uint64_t step_count = 0;        // full steps
    std::string steps_source;
    std::string steps_detail;
    uint32_t window = 1;
    uint64_t warmup_steps = 0;      // judged steps start after these
    double leak_bytes_per_step = 0; // all leak sites together
    std::optional<uint64_t> projected_oom_step;  // earliest over devices
    std::vector<DeviceSummary> devices;
    std::vector<SiteFinding> leaks;       // sorted by bytes_per_step, largest first
    std::vector<NotLeak> not_leaks;
    std::vector<std::string> notes;       // what the reader should know (no history, few steps)
    std::vector<std::string> warnings;    // from reading the input
    std::vector<std::string> input_faults;  // why the input cannot be judged (verdict "cannot-judge")
    std::vector<std::pair<std::string, std::string>> meta;
    double analysis_seconds = 0;
    double import_seconds = 0;      // reading the input into events (set by whoever read it)
};

// The ranks of one distributed run side by side (analysis/ranks.h fills it).
struct RankRow {
    int rank = -1;
    size_t run = 0;                 // index into the runs compared
    double leak_bytes_per_step = 0;
    uint64_t allocated = 0;         // at the last step end, over the rank's devices
    uint64_t peak_allocated = 0;    // highest peak of any step
};

struct RankComparison {
    std::vector<RankRow> rows;      // by rank
    std::vector<std::string> skew;  // what differs between ranks; empty when they agree
};

}  // namespace vramscope
