#include "analysis/judge.h"

#include <algorithm>
#include <cmath>


namespace vramscope {

Judgement judge(std::span<const Stretch> held, size_t min_steps) {
    Judgement j;
    if (held.empty()) return j;
    const Stretch all = merged(held);
    const size_t n = all.steps();
    j.rises = all.rises;
    j.gained = all.gained;
    j.given_back = all.given_back;
    if (all.last_rise != Stretch::kNone) j.last_rise = all.last_rise - all.from;
    j.last_high = all.high_at - all.from;
    if (all.climb) j.first_rise = n - 1 - all.climb;
    if (j.rises == 0) {
        j.shape = all.first > 0 ? Shape::warm_up : Shape::level;
        return j;
    }
    // Step ends a..b of the judged ones (indices from 0).
    const auto fit_of = [&](size_t a, size_t b) {
        return fit_stretches(cut(held, uint32_t(all.from + a), uint32_t(all.from + b)));
    };
    const LineFit whole = fit_stretches(held);
    j.bytes_per_step = whole.slope;
    j.r2 = whole.r2;
    const size_t recent = std::min(n / 2 + 1, kRecentSteps);
    j.recent_bytes_per_step = n >= min_steps ? fit_of(n - recent, n - 1).slope : whole.slope;
    if (n < min_steps) {
        j.shape = all.last > all.first ? Shape::too_short : Shape::level;
        return j;
    }
    const bool new_high = new_high_at_end(j, n);
    const double span = double(n - 1);
    const bool grows = whole.slope >= kMinLeakRate && whole.r2 >= 0.5 && all.last - all.first >= 0.25 * whole.slope * span;
    if (j.rises >= 2 && new_high && grows) {
        const LineFit early = fit_of(0, n / 2), late = fit_of(n / 2, n - 1);
        j.shape = late.slope < (2.0 / 3.0) * early.slope ? Shape::slowing : Shape::rising;
    } else if (j.rises >= 2 && !new_high) {
        j.shape = Shape::bounded;
    } else {
        j.shape = Shape::level;
    }
    return j;
}

Judgement judge(std::span<const double> held, size_t min_steps) { return judge(stretches_of(held), min_steps); }

bool new_high_at_end(const Judgement& j, size_t n) {
    if (n < 2) return false;
    return j.rises > 0 && j.last_high >= n - std::min(flat_tail(n), n - 1);
}

SiteJudgement judge_site(std::span<const Stretch> aged, std::span<const Stretch> held, size_t min_steps) {
    return SiteJudgement{judge(aged, min_steps), judge(held, min_steps)};
}

SiteJudgement judge_site(std::span<const double> aged, std::span<const double> held, size_t min_steps) {
    return SiteJudgement{judge(aged, min_steps), judge(held, min_steps)};
}

PoolJudgement judge_pool(std::span<const Stretch> in_use, double pool_growth, double driver_growth, size_t min_steps) {
    return PoolJudgement{judge(in_use, min_steps), pool_counts_for(driver_growth, pool_growth)};
}

PoolJudgement judge_pool(std::span<const double> in_use, double pool_growth, double driver_growth, size_t min_steps) {
    return judge_pool(stretches_of(in_use), pool_growth, driver_growth, min_steps);
}

std::optional<uint64_t> projected_oom_step(uint64_t step, uint64_t capacity, uint64_t peak, double rate) {
    if (rate <= 0 || capacity == 0) return std::nullopt;
    const double headroom = capacity > peak ? double(capacity - peak) : 0;
    return step + uint64_t(std::ceil(headroom / rate));
}

}  // namespace vramscope
