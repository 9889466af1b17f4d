// Trace in, findings out: replays the events step by step and judges every allocation site.
#pragma once
#include <cstdint>

#include "events/trace.h"
#include "findings/findings.h"

namespace vramscope {

struct AnalysisOptions {
    uint32_t window = 1;          // an allocation of step k "survives" if still live at the end of k+window
    uint64_t device_memory = 0;   // capacity override for the OOM projection (bytes); 0: from the trace
    int warmup_steps = -1;        // steps not judged at the start; -1: kWarmupSteps (analysis/judge.h)
};

Findings analyze(const Trace& trace, const AnalysisOptions& options = {});

}  // namespace vramscope
