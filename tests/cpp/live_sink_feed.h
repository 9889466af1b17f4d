// A trace's stack table handed to a live sink as a capture hands it frames: what a test needs
// before it feeds the sink the trace's events, to set the live judgement beside the offline one.
#pragma once
#include <vector>

#include "analysis/live_sink.h"
#include "events/stack_table.h"

namespace vramscope::testing {

inline void feed_stacks(LiveSink& sink, const StackTable& stacks) {
    for (uint32_t stack = 1; stack <= stacks.stack_count(); ++stack) {
        std::vector<SinkFrame> frames;
        for (uint32_t id : stacks.frames_of(stack)) {
            const Frame& fr = stacks.frame(id);
            frames.push_back(SinkFrame{id, stacks.string(fr.file), stacks.string(fr.function), fr.line});
        }
        sink.stack(stack, frames);
    }
}

}  // namespace vramscope::testing
