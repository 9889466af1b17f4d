// A series of bytes held at step ends, kept as what changes: a value changes only when one of its
// blocks is allocated or freed, so a series costs its changes, never its steps.
//
// Its change points are exact. Past 2 × kBucketRuns of them, the oldest kBucketRuns (never those
// in its head, the steps up to exact_until) fold into a bucket, and past kBuckets buckets the two
// neighbours spanning fewest steps merge into one: memory stays bounded however often it changes,
// and buckets stay about alike in span. A bucket keeps what the judge reads of its steps whole
// (Stretch): its first and last values, its high and where it was first reached, its rises, the
// gains and falls, its final climb, and the moments a line is fitted from. So every figure the
// judge gives is exact (to the rounding of a sum) however much was folded, the recent steps
// (at least kBucketRuns ≥ kRecentSteps step ends) and the head included, with one exception:
// - a fit over part of a bucket (the early and late halves of judge.h's slowing test, split at the
//   judged range's middle) reads that part at the bucket's mean. Each half's slope is then off by at
//   most 6·Δ·L / (m² − 1) bytes/step (Δ: the highest minus the lowest value the bucket held, L: its
//   steps, m: the half's step ends). Only `rising` against `slowing` may change, never whether a
//   site leaks, nor its rate, fit or first step.
// at_end() of a step inside a bucket is likewise the bucket's mean (the report's drawing only).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "analysis/fit.h"

namespace vramscope {

// Consecutive step ends from..to of a series: what the judge reads of them. Two side by side are
// one (append()), so a whole series is read from its runs and buckets alike.
struct Stretch {
    static constexpr uint32_t kNone = UINT32_MAX;
    uint32_t from = 0, to = 0;      // step ends, inclusive
    double first = 0, last = 0;     // held at `from`, at `to`
    double high = 0;                // the most held at any of them
    uint32_t high_at = 0;           // the first step end that held it
    uint32_t rises = 0;             // step ends after `from` that held more than the one before
    uint32_t first_rise = kNone;    // the first and last of them
    uint32_t last_rise = kNone;
    uint32_t climb = 0;             // its last step ends that each held more than the one before
    double gained = 0, given_back = 0;  // the rises and the falls, added up
    double mean = 0;                // moments about the mean, for fits (fit_stretches)
    double spread = 0;              // Σ (held − mean)²
    double co = 0;                  // Σ (step − middle step) · (held − mean)

    static Stretch run(uint32_t from, uint32_t to, double value);
    size_t steps() const { return size_t(to) - from + 1; }
    double middle() const { return (double(from) + double(to)) / 2; }
    // `next` begins at to + 1: this becomes both.
    void append(const Stretch& next);
    // Steps a..b of it, held at its mean (exact for a run, which holds one value).
    Stretch part(uint32_t a, uint32_t b) const;
};

// The stretches side by side as one.
Stretch merged(std::span<const Stretch> pieces);

// Least squares over consecutive stretches against the step, as fit_line() over the values they
// stand for; intercept at the first step.
LineFit fit_stretches(std::span<const Stretch> pieces);

// Values at step ends 0, 1, ... as runs.
std::vector<Stretch> stretches_of(std::span<const double> values);

// Steps a..b (inclusive) of consecutive stretches, the stretches cut at them (a cut bucket is
// read at its mean: Stretch::part).
std::vector<Stretch> cut(std::span<const Stretch> pieces, uint32_t a, uint32_t b);

class StepSeries {
public:
    static constexpr size_t kBucketRuns = 128;  // runs a bucket folds
    static constexpr size_t kBuckets = 32;

    // Runs starting at steps up to `step` are never folded: where judging may begin.
    void keep_exact_until(uint32_t step) { exact_until_ = step; }
    // Holds `value` from the end of `step` on; steps only increase.
    void write(uint32_t step, double value) {
        last_value_ = value;
        if (step <= exact_until_) return head_.push_back(Run{step, value});
        if (written_ - open_first_ == kBucketRuns) [[unlikely]] close_bucket(step - 1);
        if (recent_.size() < kRingRuns) [[unlikely]] recent_.push_back(Run{step, value});
        else recent_[ring_at_] = Run{step, value};
        ring_at_ = ring_at_ + 1 == kRingRuns ? 0 : ring_at_ + 1;
        ++written_;
    }
    // The value written last (0 before any).
    double last_value() const { return last_value_; }
    // Held at the end of step k (0 before the first change; a bucket's mean inside one).
    double at_end(size_t k) const;
    // Step ends a..b as stretches (0 before the first change), in order.
    std::vector<Stretch> stretches(uint32_t a, uint32_t b) const;
    size_t folded_buckets() const { return buckets_.size(); }

private:
    struct Run {
        uint32_t from;
        double value;
    };
    // The runs since the last bucket but one was folded: that bucket's and the open one's.
    static constexpr size_t kRingRuns = 2 * kBucketRuns + 1;
    // The open bucket's runs, the last ending at `end`, become the latest bucket.
    void close_bucket(uint32_t end);
    // kBucketRuns runs and where the run after them begins, as one stretch.
    static Stretch bucket_of(std::span<const Run> runs);
    // A write only stores its run: a bucket is made once its runs are all written, from the ring.
    uint64_t written_ = 0;         // runs written after the head
    uint32_t ring_at_ = 0;         // written_ % kRingRuns
    double last_value_ = 0;
    uint32_t exact_until_ = 0;
    uint64_t open_first_ = 0;      // the open bucket's first run
    uint64_t ring_first_ = 0;      // the first run the ring still holds (written_ counts them)
    std::vector<Run> head_;        // never folded
    std::vector<Stretch> buckets_;
    std::optional<Stretch> last_closed_;  // the latest bucket, its runs still in the ring
    std::vector<Run> recent_;      // the ring of runs ring_first_..written_ − 1, by index % kRingRuns
};

}  // namespace vramscope
