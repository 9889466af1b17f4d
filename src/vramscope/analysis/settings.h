// What the judge is told, in one struct: the live monitor, the analysis of a trace and a capture's
// analysis at its end all take it, so each default is written once (here and in judge.h's
// constants) and a value out of range is refused, never silently replaced.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "analysis/judge.h"

namespace vramscope {

struct JudgeSettings {
    uint32_t window = 1;             // an allocation of step k survives if still live at the end of k + window
    int warmup = -1;                 // steps never judged at the start; -1: warmup_steps(the run's steps)
    uint32_t min_steps = kMinSteps;  // step ends after warm-up needed to call a shape

    static constexpr uint32_t kMaxWindow = 1000;
    // Throws std::invalid_argument naming the setting and its range.
    void check() const {
        if (window < 1 || window > kMaxWindow)
            throw std::invalid_argument("window must be 1 to " + std::to_string(kMaxWindow) + " steps, not " +
                                        std::to_string(window));
        if (warmup < -1) throw std::invalid_argument("warmup must be -1 (the default) or a number of steps, not " +
                                                     std::to_string(warmup));
        if (min_steps < 2) throw std::invalid_argument("min_steps must be at least 2, not " + std::to_string(min_steps));
    }
    // The default warm-up of a run made to judge `judged` steps after it (a test's check): the
    // warm-up that warmup_steps() gives the whole run.
    static size_t warmup_for_judged(size_t judged) {
        size_t w = 0;
        while (warmup_steps(judged + w) > w) ++w;
        return w;
    }
};

}  // namespace vramscope
