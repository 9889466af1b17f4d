// Growth inside a step: what a site holds at the end of each unit that repeats inside a step (a
// microbatch: a forward and its backward; an evaluation batch or a generate() call run between
// optimizer steps; each ended by a unit marker named by its unit), judged by the step rule
// (judge.h) with the units in place of step ends. A step's units are judged in runs of one unit:
// a step of 4 microbatches and an evaluation of 50 batches is a run of each, as neither repeats
// inside the other. A site leaks inside a step when, in some
// step of at least kMinSteps units, its bytes at unit ends rise as a leak does and are given back
// once the step is done (by the next step's first unit end, or the trace's end, at most what it
// held at the first unit's end is left): each microbatch kept something until the optimizer step
// was done with it (seed 002: losses kept with their grad_fn, released after the step).
// Growth that the step's end keeps is the step-end judge's. A step needs no warm-up here: one
// optimizer step of enough microbatches is judged.
//
// The replay writes a site's unit ends as it writes its step ends: only when they change, for the
// run in hand; each run's touched sites are judged at its end and forgotten.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "analysis/judge.h"
#include "findings/findings.h"

namespace vramscope {

// The unit marker a capture writes as a backward ends; the others are named by their unit ("eval
// batch", "generate() call": the capture's step units).
inline constexpr std::string_view kBackwardUnitMarker = "backward";
// What a unit marker's units are called ("microbatch" for a backward's, and for an unnamed one).
inline std::string_view unit_of_marker(std::string_view name) {
    return name.empty() || name == kBackwardUnitMarker ? kMicrobatchUnit : name;
}

// A site's bytes at the unit ends of one run of units, run-length.
struct UnitSeries {
    uint32_t run = UINT32_MAX;   // the run they are of
    uint32_t touched = 0;        // the unit of its last change in that run
    int64_t at_start = 0;        // held when the step began
    // (from unit, bytes): held at the unit ends from `from` until the next entry's, or `touched`.
    std::vector<std::pair<uint32_t, int64_t>> held;
};

// A step in which a site rose across its units; its worst such step, by rate per unit, once given back.
struct WithinStepRecord {
    double bytes_per_unit = 0, r2 = 0;
    uint32_t units = 0, step = 0;
    uint32_t unit_marker = 0;    // the name of its units' marker, an id in the trace's strings
    uint32_t steps_seen = 1;
    uint32_t stack = 0;          // of its latest allocation then: the blocks that grew
    int64_t bytes_added = 0;     // at the last unit's end, beyond the step's start
    int64_t first_unit = 0;      // held at the first unit's end: at most this may be left once given back
};

// A site's unit series at the end of a run of `units` units in `step`, `live` what it holds now:
// the run's rise, when it rose as a leak does; whether it is given back is for the caller to see later.
std::optional<WithinStepRecord> judge_units(const UnitSeries& series, int64_t live, uint32_t units, uint32_t step,
                                            uint32_t stack, uint32_t unit_marker = 0);

// Keeps the worse of a site's record and a step's, and counts the step.
void keep_worst(std::optional<WithinStepRecord>& record, const WithinStepRecord& step);

}  // namespace vramscope
