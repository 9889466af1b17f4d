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
// A series is read as stretches of step ends (analysis/step_series.h), so the offline analysis
// judges a site's change points and the live monitor its last step ends by one reading.
// A site is judged on two series (judge_site): the bytes of its blocks a window old or more at
// each step end (what steps leave behind), and all the bytes it holds then (a buffer freed and
// replaced by a bigger one every step leaves nothing behind, yet grows). It leaks when either
// series does, all it holds only if it gives back at most a quarter of what it gains (varies());
// the survivors are the evidence when both do.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "analysis/step_series.h"
#include "findings/vocabulary.h"

namespace vramscope {

inline constexpr size_t kMinSteps = 8;        // step ends after warm-up needed to call a shape
inline constexpr size_t kWarmupSteps = 3;     // steps never judged at the start (optimizer state, caches)
inline constexpr double kMinLeakRate = 512;   // bytes/step below which nothing is called a leak
inline constexpr size_t kRecentSteps = 64;    // the recent rate's span; also what the live monitor keeps
inline constexpr double kGivesBack = 0.25;    // falls over rises past which holdings vary, not grow
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
    double gained = 0;                 // the rises added up
    double given_back = 0;             // the falls added up
    // It gives back more than kGivesBack of what it gains: what it holds at step ends goes up
    // and down (a batch in hand of varying size), however it trends.
    bool varies() const { return given_back > kGivesBack * gained; }
};

// min_steps: fewer step ends than this are too short to call a shape (JudgeSettings). `held`: the
// judged step ends, consecutive.
Judgement judge(std::span<const Stretch> held, size_t min_steps = kMinSteps);
Judgement judge(std::span<const double> held, size_t min_steps = kMinSteps);

// True when a judged series of n step ends made a new high in its last flat_tail(n) of them.
bool new_high_at_end(const Judgement& j, size_t n);

struct SiteJudgement {
    Judgement aged;  // its blocks a window old or more (level when none ever survived)
    Judgement held;  // all it holds
    // All it holds leaks only when it does not vary: a batch in hand that grows with its input
    // gives back at step ends, a buffer replaced by a bigger one never does.
    bool held_leaks() const { return is_leak(held.shape) && !held.varies(); }
    bool leaks() const { return is_leak(aged.shape) || held_leaks(); }
    LeakEvidence evidence() const {
        return is_leak(aged.shape) || !held_leaks() ? LeakEvidence::survivors : LeakEvidence::replaced_bigger;
    }
    // The series that shows the leak: its rate, shape and fit are the site's.
    const Judgement& leak() const { return evidence() == LeakEvidence::survivors ? aged : held; }
};

SiteJudgement judge_site(std::span<const Stretch> aged, std::span<const Stretch> held, size_t min_steps);
SiteJudgement judge_site(std::span<const double> aged, std::span<const double> held, size_t min_steps);

// A library that sub-allocates from a pool of its own (XLA's allocator, CuPy's memory pool) takes
// driver memory in doublings, or all at once: its driver calls show the pool, not its arrays. Where
// the library's own count was read (its bytes in use at step ends), that count is judged instead,
// as a site's `held` series is (it has no age to tell survivors by): a leak when it rises as one
// and does not vary. It speaks for the library's memory on the device only where its pool accounts
// for what the driver calls showed (pool_counts_for); else the driver's sites are judged as ever.
struct PoolJudgement {
    Judgement in_use;
    bool counts = false;  // its pool accounts for the library's driver memory on the device
    bool leaks() const { return counts && is_leak(in_use.shape) && !in_use.varies(); }
};
// The library's driver memory grew, over the judged steps, by no more than its pool says the pool
// did, give or take an eighth and 4 MiB (page rounding, a workspace taken beside the pool). A
// library allocating past its pool (CuPy with another allocator set) fails it.
inline bool pool_counts_for(double driver_growth, double pool_growth) {
    return driver_growth <= std::max(0.0, pool_growth) * 1.125 + double(4 << 20);
}
// `in_use`: its bytes in use at the judged step ends; the growth of its pool and of the library's
// driver memory over the same steps.
PoolJudgement judge_pool(std::span<const Stretch> in_use, double pool_growth, double driver_growth, size_t min_steps);
PoolJudgement judge_pool(std::span<const double> in_use, double pool_growth, double driver_growth, size_t min_steps);

// How sure a leak is, 0..1: its fit's R² × how many steps showed it (kSureAfterSteps or more: full)
// × how many steps were judged (kSureAfterJudged or more: full). Steps that showed it, not how
// often: a leak that strikes every 10th step, as a steady staircase, is as sure as a ramp. A leak
// at kConfirmedAt or more is confirmed: its rate counts in the verdict and the ledger's leak part.
inline constexpr double kSureAfterSteps = 5;
inline constexpr double kSureAfterJudged = 8;
inline constexpr double kConfirmedAt = 0.5;
inline double leak_confidence(double r2, size_t showed, size_t judged) {
    const double fit = r2 < 0 ? 0 : r2 > 1 ? 1 : r2;
    return fit * std::min(1.0, double(showed) / kSureAfterSteps) * std::min(1.0, double(judged) / kSureAfterJudged);
}
inline bool confirmed(double confidence) { return confidence >= kConfirmedAt; }

// The step at which `capacity` is reached from `peak` bytes at `step` when `rate` bytes/step
// accumulate; none without a rate or a capacity.
std::optional<uint64_t> projected_oom_step(uint64_t step, uint64_t capacity, uint64_t peak, double rate);

}  // namespace vramscope
