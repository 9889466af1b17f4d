// The one rule for "does this site leak?". The live monitor applies it to the step ends it keeps
// and the offline analysis to the whole trace, so a live warning and the final table cannot
// disagree on the same series. Input: the bytes a site held at each step end after warm-up.
//
// The rule, in words (docs/findings.md says the same):
// - fewer than kMinSteps step ends: a site that rose is `too_short`, never a guess;
// - no rise at all: `warm_up` if it holds something, else `level`;
// - a leak (`rising`, or `slowing` when the second half's slope is under 2/3 of the first's)
//   rises in at least 2 steps, fits a line (R² ≥ 0.5, slope ≥ 512 B/step), grew by at least a
//   quarter of slope × span, and reached a new high in its last flat_tail(n) step ends;
// - `bounded`: it rose in at least 2 steps, but held no new high in its last flat_tail(n) step
//   ends: flat at the end, or falling. Growth that merely slows is not a bound.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "findings/vocabulary.h"

namespace vramscope {

inline constexpr size_t kMinSteps = 8;        // step ends after warm-up needed to call a shape
inline constexpr size_t kWarmupSteps = 3;     // steps never judged at the start (optimizer state, caches)
inline constexpr double kMinLeakRate = 512;   // bytes/step below which nothing is called a leak
inline constexpr size_t kRecentSteps = 64;    // the recent rate's span; also what the live monitor keeps
// Warm-up for a run of `steps` steps: kWarmupSteps, fewer only for runs too short to judge anyway.
inline size_t warmup_steps(size_t steps) { return steps / 4 < kWarmupSteps ? steps / 4 : kWarmupSteps; }
// Step ends at the end of a series that must show no new high for it to count as bounded.
inline size_t flat_tail(size_t n) { return n / 4 > 4 ? n / 4 : 4; }

struct Judgement {
    Shape shape = Shape::level;
    double bytes_per_step = 0;         // least-squares slope over the whole series
    double recent_bytes_per_step = 0;  // over its second half, at most its last kRecentSteps step ends
    double r2 = 0;
    size_t rises = 0;                  // step ends that held more than the one before
    size_t last_rise = 0;              // index of the last of them
    size_t last_high = 0;              // index of the last step end that held more than all before it
    size_t first_rise = 0;             // index of the first step end of the final unbroken climb
};

Judgement judge(std::span<const double> held);

// The step at which `capacity` is reached from `peak` bytes at `step` when `rate` bytes/step
// accumulate; none without a rate or a capacity.
std::optional<uint64_t> projected_oom_step(uint64_t step, uint64_t capacity, uint64_t peak, double rate);

}  // namespace vramscope
