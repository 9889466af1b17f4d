// Trace in, findings out: replays the events step by step and judges every allocation site.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include "analysis/settings.h"
#include "common/limits.h"

#include "events/trace.h"
#include "findings/findings.h"

namespace vramscope {

struct AnalysisOptions {
    JudgeSettings judge;          // window, warm-up, minimum steps: as the live monitor has them
    uint64_t device_memory = 0;   // capacity override for the OOM projection (bytes); 0: from the trace
    // --steps A:B: judge steps A..B only (A replaces the warm-up; the trace is read up to B's end).
    uint64_t first_step = 0;
    uint64_t last_step = UINT64_MAX;
    // The first step judged, before a run's length bounds it: --steps' first, else the warm-up;
    // -1: the judge's default, warmup_steps() of the run. What a capture is told too (vramscope run).
    int64_t judged_from() const { return first_step > 0 ? int64_t(first_step) : int64_t(judge.warmup); }
    // And in a run of `steps` steps.
    size_t judged_from(size_t steps) const {
        const int64_t from = judged_from();
        return from >= 0 ? std::min<size_t>(size_t(from), steps) : warmup_steps(steps);
    }
};

// A trace in memory.
Findings analyze(const Trace& trace, const AnalysisOptions& options = {});
// A file, read as it is analysed: a .vscope trace streams through in bounded memory (events are
// never all held); other inputs are loaded whole first. Throws what load_any throws.
Findings analyze_file(const std::string& path, const AnalysisOptions& options = {}, const ReadLimits& limits = {});

}  // namespace vramscope
