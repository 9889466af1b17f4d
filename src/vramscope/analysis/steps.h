// Where one training step ends and the next begins, from the best source a trace offers:
// our own step markers, else torch's optimizer annotations, else optimizer frames in the stacks,
// else the period of the allocations.
#pragma once
#include <string>
#include <vector>

#include "events/trace.h"
#include "findings/vocabulary.h"

namespace vramscope {

struct Steps {
    // Index of the last event of each full step; events after the last index form an unfinished
    // step that the timeline shows but survivor analysis does not judge.
    std::vector<size_t> ends;
    StepsSource source = StepsSource::none;
    std::string detail;  // e.g. the annotation name, or the anchor site of the period
};

Steps find_steps(const Trace& trace);

}  // namespace vramscope
