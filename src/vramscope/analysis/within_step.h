// Growth inside a step: what a site holds at the end of each unit that repeats inside a step (a
// microbatch: a forward and its backward, ended by the microbatch marker), judged by the step
// rule (judge.h) with the units in place of step ends. A site leaks inside a step when, in some
// step of at least kMinSteps units, its bytes at unit ends rise as a leak does and are given back
// once the step is done (by the next step's first unit end, or the trace's end, at most what it
// held at the first unit's end is left): each microbatch kept something until the optimizer step
// was done with it (seed 002: losses kept with their grad_fn, released after the step).
// Growth that the step's end keeps is the step-end judge's. A step needs no warm-up here: one
// optimizer step of enough microbatches is judged.
//
// The replay writes a site's unit ends as it writes its step ends: only when they change, for the
// step in hand; each step's touched sites are judged at its end and forgotten.
#pragma once
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "analysis/judge.h"

namespace vramscope {

// A site's bytes at the unit ends of one step, run-length.
struct UnitSeries {
    uint32_t step = UINT32_MAX;  // the step they are of
    uint32_t touched = 0;        // the unit of its last change in that step
    int64_t at_start = 0;        // held when the step began
    // (from unit, bytes): held at the unit ends from `from` until the next entry's, or `touched`.
    std::vector<std::pair<uint32_t, int64_t>> held;
};

// A step in which a site rose across its units; its worst such step, by rate per unit, once given back.
struct WithinStepRecord {
    double bytes_per_unit = 0, r2 = 0;
    uint32_t units = 0, step = 0;
    uint32_t steps_seen = 1;
    uint32_t stack = 0;          // of its latest allocation then: the blocks that grew
    int64_t bytes_added = 0;     // at the last unit's end, beyond the step's start
    int64_t first_unit = 0;      // held at the first unit's end: at most this may be left once given back
};

// A site's unit series at the end of a step of `units` units, `live` what it holds now: the step's
// rise, when it rose as a leak does; whether it is given back is for the caller to see later.
std::optional<WithinStepRecord> judge_units(const UnitSeries& series, int64_t live, uint32_t units, uint32_t step,
                                            uint32_t stack);

// Keeps the worse of a site's record and a step's, and counts the step.
void keep_worst(std::optional<WithinStepRecord>& record, const WithinStepRecord& step);

}  // namespace vramscope
