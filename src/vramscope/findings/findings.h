// What analysis concludes about one trace: the contract every consumer reads (terminal, JSON,
// HTML, assert, compare). docs/findings.md documents its JSON form; bump kSchemaVersion on change.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "findings/vocabulary.h"

namespace vramscope {

inline constexpr int kSchemaVersion = 1;

// The site of allocations made where no Python frame ran (autograd engine threads, C++ code).
inline constexpr const char* kNoPythonFrame = "<no Python frame: autograd engine or C++ thread>";

struct SourceLine {
    std::string file;
    uint32_t line = 0;
    std::string function;
};

// What the rules on frame names read of a name: a path longer than any file system allows
// (PATH_MAX) names no real file, and a hostile trace's megabyte names then cost what a path costs.
inline std::string_view name_tail(std::string_view name) {
    constexpr size_t kLongest = 4096;
    return name.size() > kLongest ? name.substr(name.size() - kLongest) : name;
}

// A frame of C++ (torch's stacks="all" records them), or one with no file at all.
inline bool is_cpp_file(std::string_view file) {
    if (file.empty() || file == "??") return true;
    for (std::string_view ext : {".cpp", ".cc", ".h", ".hpp", ".cu"})
        if (file.ends_with(ext)) return true;
    return false;
}

struct StepPoint {
    uint64_t allocated = 0;       // at the step's end
    uint64_t reserved = 0;        // at the step's end
    uint64_t peak_allocated = 0;  // highest inside the step
    uint64_t pending_free = 0;    // freed by the program, not yet by the allocator (other streams)
    // Live bytes the trace saw allocated, by CUDA stream handle (blocks from before the trace
    // began are in `allocated` only).
    std::vector<std::pair<uint64_t, uint64_t>> by_stream;
    uint64_t external = 0;        // device memory outside torch's allocator, live at the step's end
    uint64_t pinned = 0;          // pinned host memory allocated through this device's context
    std::optional<uint64_t> nvml_used;  // NVML's figure for the process at the step's end: read in the step, none of the
                                        // recorded memory changing after it
};

struct StreamUsage {
    uint64_t stream = 0;
    uint64_t allocated_at_end = 0;  // live bytes allocated on it, at the last step's end
    uint64_t leaked_bytes = 0;      // of those, held by leak sites
};

// The request an out-of-memory event failed, against what was free then: the device's free memory,
// what torch's cache held free in all, and its largest free block. Free bytes enough in all but no
// block as large is fragmentation.
struct OomRequest {
    uint64_t step = 0;
    uint64_t asked = 0, device_free = 0, cached_free = 0, largest_free_block = 0;
    bool fragmentation() const { return cached_free + device_free >= asked && largest_free_block < asked && device_free < asked; }
};

struct DeviceSummary {
    uint16_t device = 0;
    uint64_t total_memory = 0;              // 0: unknown
    std::string capacity_source;            // "trace", "--device-memory", "oom-event" (free + reserved then)
    std::vector<StepPoint> timeline;        // one per step (the unfinished tail included, last)
    std::vector<StreamUsage> streams;
    std::optional<uint64_t> projected_oom_step;
    std::optional<uint64_t> oom_step;       // the trace holds an OOM event in this step
    std::optional<OomRequest> oom;          // its first
};

// One way a leak's memory was kept alive, as the live process found it (python/vramscope/owners):
// a root, the edges from it, and the object reached; kind "reachable" or the cycle it is in.
struct Owner {
    std::string path;                // root and edges as one expression: "main() local 'cache'[3]"
    std::string root;
    std::vector<std::string> edges;
    std::string target;              // the tensor reached
    std::string kind;
};

// An allocation site judged to leak.
struct SiteFinding {
    SourceLine site;
    Memory memory = Memory::torch;   // whose memory: torch's allocator, a library's own, pinned host
    std::string library;             // external and pinned: who called the driver ("NCCL", "libleaky.so")
    std::vector<SourceLine> stack;   // innermost first; the most common full stack at this site
    size_t stack_shown_from = 0;     // frames before it are the unwinder's and allocator's own: kept, not shown
    // The library function that allocates its blocks, called from `site` (transformers'
    // torch_pad_and_concatenate under `trainer.evaluate()`): the stack's innermost Python frame
    // outside torch, when it is not the site's own.
    std::optional<SourceLine> allocated_in;
    uint16_t device = 0;
    uint64_t stream = 0;             // where most of its surviving bytes were allocated
    Shape shape = Shape::rising;     // rising, or slowing (a leak whose growth slows but goes on)
    LeakEvidence evidence = LeakEvidence::survivors;
    double bytes_per_step = 0;       // fitted slope of the bytes it holds at step ends over the judged steps
    double recent_bytes_per_step = 0;  // over the second half of the judged steps, at most the last 64 (the OOM projection's)
    double fit_r2 = 0;
    uint64_t first_step = 0;         // first step whose allocations here outlived the window, else of its climb
    uint64_t live_bytes = 0;         // held at the last step's end
    uint64_t peak_bytes = 0;         // most it held at any step's end
    std::vector<uint64_t> held;      // bytes it held at each full step's end (the report's stacked area)
    uint64_t surviving_allocations = 0;
    double recurrence = 0;           // share of judged steps that left survivors here, or (replaced-bigger) that rose
    double share_of_growth = 0;      // of the device's allocated growth over the judged steps
    double confidence = 0;           // 0..1
    // Blocks still live at the end (address, size): what `explain` maps to tensors.
    std::vector<std::pair<uint64_t, uint64_t>> live_blocks;
    // Who held it (live captures: TRACE.owners.json, joined by findings/json_reader.h attach_owners).
    std::vector<Owner> owners;
    std::optional<uint64_t> owners_found_at_step;  // found during the run, not at its end
};

// A site's share of a ledger part.
struct LedgerSite {
    SourceLine site;
    int64_t bytes = 0;
};

// One device's growth of allocated bytes at step ends, from the end of the first full step to
// the end of the last, split so that the parts sum to it exactly (analysis/ledger.h).
struct DeviceLedger {
    uint16_t device = 0;
    uint64_t from_step = 0, to_step = 0;
    uint64_t allocated_from = 0, allocated_to = 0;
    int64_t growth = 0;                               // allocated_to - allocated_from
    std::array<int64_t, kLedgerParts> parts{};        // by LedgerPart
    int64_t unexplained_allowed = 0;                  // what a "no leak" may stand beside
    std::vector<LedgerSite> unexplained_sites;        // the largest, at most 5
    int64_t part(LedgerPart p) const { return parts[size_t(p)]; }
    // Within its allowance: what "no leak" needs on every device.
    bool balanced() const { return part(LedgerPart::unexplained) <= unexplained_allowed; }
};

// One holder's memory outside torch's caching allocator at the last step end.
struct LibraryBytes {
    std::string library;  // "NCCL", "CuPy", "JAX/XLA", "torch", or a .so by name (analysis/libraries.h)
    uint64_t bytes = 0;   // live at the last step end
    int64_t growth = 0;   // from the first judged step end to the ledger's
    // A library that counts its own pool (JAX's memory_stats(), CuPy's default pool), as it counted
    // it at the reading that stood for the ledger's step end: what its live arrays hold, and what
    // the pool keeps beyond them for reuse (its pool's bytes less those). None: no count was read.
    std::optional<uint64_t> in_use, cached;
};

// Everything the process holds on one device, or pinned on the host, at the last step end: what
// the driver says it uses (NVML), split by holder so that the parts sum to it.
struct UsageLedger {
    std::optional<uint16_t> device;       // none: the host's pinned memory
    uint64_t step = 0;                    // the step end it describes (a device's: the last NVML read)
    std::optional<uint64_t> nvml_used;    // NVML's figure for the process; none: not read (snapshot, no NVML, host)
    uint64_t torch_reserved = 0;          // allocated + cached-free (0 on the host)
    std::vector<LibraryBytes> libraries;  // outside torch's allocator, largest first
    // With NVML only: the CUDA context and module images (NVML's residual at the end of warm-up),
    // of the residual's change since, what the driver's 2 MiB pages of the outside allocations may
    // hold beyond their bytes, taken or given back since (analysis/driver_pages.h), and what is left.
    // nvml_used = torch_reserved + libraries + context + page_rounding + unexplained.
    std::optional<uint64_t> context;
    std::optional<int64_t> page_rounding;
    std::optional<int64_t> unexplained;
};

// A site's bytes live at a device's peak.
struct PeakSite {
    SourceLine site;
    uint64_t bytes = 0;
    PeakCategory category = PeakCategory::other;  // of most of its bytes
    std::vector<SourceLine> stack;                // innermost first: the stack of most of its bytes
    size_t stack_shown_from = 0;
};

// The bytes at the peak allocated inside one nn.Module's forward (analysis/sites.h module_of).
struct PeakModule {
    std::string module;                           // "LlamaMLP"; empty: outside any module's forward
    uint64_t bytes = 0;
    PeakCategory category = PeakCategory::other;  // of most of its bytes
};

// A device at the moment its allocated memory was highest, every byte in one category
// (analysis/peak.h is the rule).
struct DevicePeak {
    uint16_t device = 0;
    uint64_t step = 0;                // the step it fell in (the unfinished tail's number after the last end)
    Phase phase = Phase::setup;
    uint64_t microbatch = 0;          // backwards ended in that step before it
    uint64_t bytes = 0;               // allocated then
    std::array<uint64_t, kPeakCategories> categories{};  // by PeakCategory: they sum to `bytes`
    uint64_t reserved = 0;            // torch's reserved then; reserved - bytes was cached, free
    uint64_t external = 0;            // device memory outside torch's allocator then
    uint64_t pinned = 0;              // pinned host memory then (the host's, not the device's)
    std::vector<PeakSite> sites;      // the largest, at most kPeakSites
    std::vector<PeakModule> modules;  // the largest, at most kPeakSites
    std::string module;               // the module of the allocation that made the peak (empty: none)
    // The trace marks backward phases: without them, activations and gradients are not told
    // apart (a forward's block freed in its step is a temporary, else other).
    bool backward_marked = false;
    bool backward_inferred = false;   // no markers, but backwards inferred from the autograd engine's allocations (analysis/phases.h)
    uint64_t category(PeakCategory c) const { return categories[size_t(c)]; }
};
inline constexpr size_t kPeakSites = 8;

// The unit of a forward and its backward inside a step; the others are the capture's step units
// run inside a step ("eval batch", "generate() call").
inline constexpr std::string_view kMicrobatchUnit = "microbatch";

// A site whose holdings grow across the units inside a step (microbatches, eval batches) and are
// released at its end: a leak no step end shows, which raises the peak (analysis/within_step.h).
struct WithinStepLeak {
    SourceLine site;
    std::vector<SourceLine> stack;   // innermost first
    size_t stack_shown_from = 0;
    uint16_t device = 0;
    Memory memory = Memory::torch;
    std::string unit;                // kMicrobatchUnit, "eval batch", ...
    double bytes_per_unit = 0;       // fitted slope over the units of its worst step
    double fit_r2 = 0;
    uint64_t units_per_step = 0;     // in that step
    uint64_t step = 0;               // that step
    uint64_t steps_seen = 0;         // steps in which it grew so
    uint64_t bytes_added = 0;        // held at the step's last unit end beyond the step's start: what it adds to the peak
    // Units per step at which the device runs out, at this rate from that step's peak.
    std::optional<uint64_t> oom_units;
    std::vector<std::pair<uint64_t, uint64_t>> live_blocks;  // (address, size), where the trace ended inside its climb
    // Found live at its highest point, each unit's part still held: as its step's optimizer step
    // began, or at a unit's end where it had risen over enough units (the end of an evaluation is unmarked).
    std::vector<Owner> owners;
    std::optional<uint64_t> owners_found_at_step;
};

struct NotLeak {
    NotLeakKind kind = NotLeakKind::warm_up;
    uint64_t bytes = 0;
    std::string why;
    std::optional<SourceLine> site;
    uint16_t device = 0;
};

// A trace's meta names device N under "device.N": the GPU's name, or "cpu" where a live-tensor
// capture recorded the host's tensors (python/vramscope/capture/describe.py), which no allocator
// reserves or caches.
inline constexpr std::string_view kHostDeviceName = "cpu";
inline std::string device_meta_key(uint16_t device) { return "device." + std::to_string(device); }
// How every output names a device: "cpu" for such host memory, else "cuda:N".
inline std::string device_name(uint16_t device, std::string_view meta_name) {
    return meta_name == kHostDeviceName ? std::string(kHostDeviceName) : "cuda:" + std::to_string(device);
}

struct Findings {
    std::string source;
    std::string format;
    Verdict verdict = Verdict::cannot_judge;
    uint64_t event_count = 0;       // counted as torch does: a `free` is two (requested, completed)
    uint64_t step_count = 0;        // full steps
    StepsSource steps_source = StepsSource::none;
    std::string steps_detail;
    std::string step_unit;          // what one step is, as users count it ("optimizer step", "eval batch")
    uint32_t window = 1;
    uint64_t warmup_steps = 0;      // judged steps start after these
    uint64_t steps_before_trace = 0; // steps the run made before the trace's first event (a ring buffer that wrapped)
    double leak_bytes_per_step = 0; // all leak sites together
    double pinned_leak_bytes_per_step = 0;  // of those, pinned host memory's: the host's RAM, never a device's
    std::optional<uint64_t> projected_oom_step;  // earliest over devices
    std::vector<DeviceSummary> devices;
    std::vector<SiteFinding> leaks;       // sorted by bytes_per_step, largest first
    std::vector<NotLeak> not_leaks;
    std::vector<DeviceLedger> ledger;     // by device: where the growth went; sums exactly
    std::vector<UsageLedger> usage;       // by device, then the host: everything the process holds
    std::vector<DevicePeak> peaks;        // by device: its highest moment, by category
    std::vector<WithinStepLeak> within_step;  // leaks inside a step, largest rate first
    std::vector<std::string> notes;       // what the reader should know (no history, few steps)
    std::vector<std::string> warnings;    // from reading the input
    std::vector<std::string> input_faults;  // why the input cannot be judged (verdict "cannot-judge")
    std::vector<std::pair<std::string, std::string>> meta;
    double analysis_seconds = 0;
    double import_seconds = 0;      // reading the input into events first (0 when it streamed through the analysis)
    bool allocated_any = false;     // any block event (not in the JSON: `--skip-empty` reads it)
    uint64_t first_step_shown = 0;  // --steps A:B: the report's chart starts at A (not in the JSON)

    std::string_view meta_value(const std::string& key) const {
        for (const auto& [k, v] : meta)
            if (k == key) return v;
        return {};
    }
    std::string device_name(uint16_t device) const {
        return vramscope::device_name(device, meta_value(device_meta_key(device)));
    }
    bool host_memory(uint16_t device) const { return meta_value(device_meta_key(device)) == kHostDeviceName; }
};

// What the live monitor said at a step end about one site: a leak confirmed (shape rising or
// slowing) or withdrawn (any other shape: it levelled off).
struct LiveFinding {
    SourceLine site;
    std::optional<SourceLine> allocated_in;  // the library function its site splits by (analysis/sites.h SiteKey)
    Memory memory = Memory::torch;
    std::string library;  // external and pinned: who called the driver
    uint16_t device = 0;
    Shape shape = Shape::rising;
    LeakEvidence evidence = LeakEvidence::survivors;
    double bytes_per_step = 0;
    uint64_t since_step = 0;  // the climb's first step; for a withdrawal, its last new high
    std::optional<uint64_t> projected_oom_step;
    std::vector<std::pair<uint64_t, uint64_t>> newest_blocks;  // (address, size): what explain maps to tensors
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
