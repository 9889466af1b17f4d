// A series kept as change points (analysis/step_series.h) answers what the dense series, a value
// per step end, answered: on random series, short (kept whole) and long (folded into buckets).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "analysis/fit.h"
#include "analysis/judge.h"
#include "analysis/step_series.h"

using namespace vramscope;

namespace {

// A random series of `steps` step ends changing at about `changes` of them: steady climbs, falls,
// plateaus and noise, in multiples of 512 bytes as allocations are.
struct Random {
    std::vector<double> dense;
    StepSeries series;
};

Random random_series(std::mt19937& rng, size_t steps, size_t changes, uint32_t exact_until) {
    Random r;
    r.series.keep_exact_until(exact_until);
    r.dense.assign(steps, 0);
    std::uniform_int_distribution<size_t> at(0, steps - 1);
    std::vector<size_t> points(changes);
    for (size_t& p : points) p = at(rng);
    std::sort(points.begin(), points.end());
    points.erase(std::unique(points.begin(), points.end()), points.end());
    std::uniform_int_distribution<int> move(-40, 60);
    double value = 0;
    for (size_t p : points) {
        value = std::max(0.0, value + 512.0 * move(rng));
        r.dense[p] = value;
        if (value != r.series.last_value()) r.series.write(uint32_t(p), value);
    }
    for (size_t k = 1; k < steps; ++k)  // held until the next change
        if (!std::binary_search(points.begin(), points.end(), k)) r.dense[k] = r.dense[k - 1];
    return r;
}

// What judge.h read of the dense series, step by step (the rule's own loops).
struct DenseFacts {
    size_t rises = 0, last_rise = 0, last_high = 0, first_rise = 0;
    double gained = 0, given_back = 0;
};
DenseFacts dense_facts(std::span<const double> held) {
    DenseFacts f;
    double high = held[0];
    for (size_t i = 1; i < held.size(); ++i) {
        if (held[i] > held[i - 1]) ++f.rises, f.last_rise = i, f.gained += held[i] - held[i - 1];
        else f.given_back += held[i - 1] - held[i];
        if (held[i] > high) high = held[i], f.last_high = i;
    }
    for (size_t i = held.size() - 1; i > 0 && held[i] > held[i - 1]; --i) f.first_rise = i - 1;
    return f;
}

void expect_same_facts(const Random& r, uint32_t a, uint32_t b) {
    const std::span<const double> dense = std::span<const double>(r.dense).subspan(a, b - a + 1);
    const DenseFacts want = dense_facts(dense);
    const Stretch got = merged(r.series.stretches(a, b));
    ASSERT_EQ(got.from, a);
    ASSERT_EQ(got.to, b);
    EXPECT_EQ(got.first, dense.front());
    EXPECT_EQ(got.last, dense.back());
    EXPECT_EQ(got.high, *std::max_element(dense.begin(), dense.end()));
    EXPECT_EQ(got.rises, want.rises);
    EXPECT_EQ(got.last_rise == Stretch::kNone ? 0 : got.last_rise - a, want.last_rise);
    EXPECT_EQ(got.high_at - a, want.last_high);
    EXPECT_EQ(got.climb ? got.steps() - 1 - got.climb : 0, want.first_rise);
    EXPECT_DOUBLE_EQ(got.gained, want.gained);
    EXPECT_DOUBLE_EQ(got.given_back, want.given_back);
}

void expect_same_fit(const LineFit& got, const LineFit& want) {
    EXPECT_NEAR(got.slope, want.slope, 1e-9 * std::max(1.0, std::fabs(want.slope)));
    EXPECT_NEAR(got.r2, want.r2, 1e-9);
}

}  // namespace

TEST(StepSeries, AShortSeriesAnswersEveryDenseQueryExactly) {
    std::mt19937 rng(41);
    for (int trial = 0; trial < 300; ++trial) {
        const size_t steps = 2 + rng() % 400;
        Random r = random_series(rng, steps, 1 + rng() % std::min<size_t>(steps, 2 * StepSeries::kBucketRuns), 3);
        ASSERT_EQ(r.series.folded_buckets(), 0u);
        for (size_t k = 0; k < steps; ++k) ASSERT_EQ(r.series.at_end(k), r.dense[k]) << "step " << k;
        const uint32_t a = uint32_t(rng() % steps), b = uint32_t(a + rng() % (steps - a));
        expect_same_facts(r, a, b);
        if (b > a) expect_same_fit(fit_stretches(r.series.stretches(a, b)), fit_line(r.dense, a, b));
        // The judge's every figure, the dense series' and the change points' alike.
        const Judgement got = judge(r.series.stretches(a, uint32_t(steps - 1)));
        const Judgement want = judge(std::span<const double>(r.dense).subspan(a));
        EXPECT_EQ(got.shape, want.shape);
        EXPECT_EQ(got.rises, want.rises);
        EXPECT_EQ(got.first_rise, want.first_rise);
        EXPECT_EQ(got.last_high, want.last_high);
        EXPECT_DOUBLE_EQ(got.bytes_per_step, want.bytes_per_step);
        EXPECT_DOUBLE_EQ(got.recent_bytes_per_step, want.recent_bytes_per_step);
        EXPECT_DOUBLE_EQ(got.r2, want.r2);
    }
}

TEST(StepSeries, AFoldedSeriesKeepsItsFactsWholeItsHeadAndRecentStepsExactAndItsBucketsBounded) {
    std::mt19937 rng(4141);
    for (int trial = 0; trial < 40; ++trial) {
        const size_t steps = 20'000 + rng() % 30'000;
        const uint32_t head = uint32_t(rng() % 8);
        Random r = random_series(rng, steps, steps / (1 + rng() % 4), head);
        ASSERT_GT(r.series.folded_buckets(), 0u);
        EXPECT_LE(r.series.folded_buckets(), StepSeries::kBuckets);
        const uint32_t last = uint32_t(steps - 1);
        for (uint32_t k = 0; k <= head; ++k) ASSERT_EQ(r.series.at_end(k), r.dense[k]);
        for (uint32_t k = last - uint32_t(StepSeries::kBucketRuns); k <= last; ++k) ASSERT_EQ(r.series.at_end(k), r.dense[k]);
        // From any step of the head to the end: what the judge reads, exact however much was folded.
        for (uint32_t from = 0; from <= head; ++from) {
            expect_same_facts(r, from, last);
            expect_same_fit(fit_stretches(r.series.stretches(from, last)), fit_line(r.dense, from, last));
            const Judgement got = judge(r.series.stretches(from, last));
            const Judgement want = judge(std::span<const double>(r.dense).subspan(from));
            EXPECT_EQ(is_leak(got.shape), is_leak(want.shape));
            EXPECT_NEAR(got.bytes_per_step, want.bytes_per_step, 1e-9 * std::max(1.0, std::fabs(want.bytes_per_step)));
            EXPECT_DOUBLE_EQ(got.recent_bytes_per_step, want.recent_bytes_per_step);
            EXPECT_EQ(got.first_rise, want.first_rise);
        }
    }
}

TEST(StepSeries, AFitOverPartOfABucketIsWithinTheStatedBound) {
    std::mt19937 rng(414141);
    for (int trial = 0; trial < 40; ++trial) {
        const size_t steps = 20'000 + rng() % 30'000;
        Random r = random_series(rng, steps, steps / 2, 3);
        const std::vector<Stretch> all = r.series.stretches(3, uint32_t(steps - 1));
        const uint32_t middle = uint32_t(3 + (steps - 3) / 2);
        const auto inside = std::find_if(all.begin(), all.end(), [&](const Stretch& s) { return s.from <= middle && middle <= s.to; });
        ASSERT_NE(inside, all.end());
        // Its range of values, from the dense series: a bucket keeps its high, not its low.
        const double low = *std::min_element(r.dense.begin() + inside->from, r.dense.begin() + inside->to + 1);
        const double range = inside->high - low;
        for (const auto& [a, b] : {std::pair<uint32_t, uint32_t>{3, middle}, {middle, uint32_t(steps - 1)}}) {
            const double m = double(b - a + 1), width = double(inside->steps());
            const double bound = 6 * range * width / (m * m - 1);
            EXPECT_LE(std::fabs(fit_stretches(cut(all, a, b)).slope - fit_line(r.dense, a, b).slope), bound + 1e-9);
        }
    }
}
