// Exports, so users keep their other tools: PyTorch's memory_viz (a snapshot pickle) and
// Perfetto / chrome://tracing (trace-event JSON with memory counters, steps and leak instants).
#pragma once
#include <string>

#include "events/trace.h"
#include "findings/findings.h"

namespace vramscope {

// A torch snapshot pickle (protocol 2, stacks memoized) as _dump_snapshot writes it, for
// https://pytorch.org/memory_viz and torch.cuda._memory_viz: "segments" (the allocator at the
// trace's end, each segment's blocks tiling it, free gaps inactive: a snapshot's own, or replayed
// from a .vscope's events), "device_traces", "external_annotations" and "allocator_settings".
// Torch's caching allocator's events only: memory outside it is not the snapshot's to show.
std::string to_memory_viz_pickle(const Trace& trace);

// Chrome trace-event JSON: allocated/reserved counters per device ("cpu memory", allocated only,
// for a live-tensor capture; at most one sample a millisecond, and at each step end), one slice per step, an instant where each leak starts.
// Where the trace has them, a counter each per device for memory outside torch's allocator
// ("cuda:0 external", "cuda:0 pinned": sampled as torch's) and NVML's figure ("cuda:0 NVML
// used": every reading, at the step ends it precedes).
std::string to_perfetto_json(const Trace& trace, const Findings& findings);

}  // namespace vramscope
