#include "analysis/judge.h"

#include <algorithm>
#include <cmath>

#include "analysis/fit.h"

namespace vramscope {

Judgement judge(std::span<const double> held, size_t min_steps) {
    Judgement j;
    const size_t n = held.size();
    if (n == 0) return j;
    double high = held[0];
    for (size_t i = 1; i < n; ++i) {
        if (held[i] > held[i - 1]) ++j.rises, j.last_rise = i, j.gained += held[i] - held[i - 1];
        else j.given_back += held[i - 1] - held[i];
        if (held[i] > high) high = held[i], j.last_high = i;
    }
    for (size_t i = n - 1; i > 0 && held[i] > held[i - 1]; --i) j.first_rise = i - 1;
    if (j.rises == 0) {
        j.shape = held.front() > 0 ? Shape::warm_up : Shape::level;
        return j;
    }
    const LineFit all = fit_line(held, 0, n - 1);
    j.bytes_per_step = all.slope;
    j.r2 = all.r2;
    const size_t recent = std::min(n / 2 + 1, kRecentSteps);
    j.recent_bytes_per_step = n >= min_steps ? fit_line(held, n - recent, n - 1).slope : all.slope;
    if (n < min_steps) {
        j.shape = held.back() > held.front() ? Shape::too_short : Shape::level;
        return j;
    }
    const bool new_high = new_high_at_end(j, n);
    const double span = double(n - 1);
    const bool grows = all.slope >= kMinLeakRate && all.r2 >= 0.5 && held.back() - held.front() >= 0.25 * all.slope * span;
    if (j.rises >= 2 && new_high && grows) {
        const LineFit early = fit_line(held, 0, n / 2), late = fit_line(held, n / 2, n - 1);
        j.shape = late.slope < (2.0 / 3.0) * early.slope ? Shape::slowing : Shape::rising;
    } else if (j.rises >= 2 && !new_high) {
        j.shape = Shape::bounded;
    } else {
        j.shape = Shape::level;
    }
    return j;
}

bool new_high_at_end(const Judgement& j, size_t n) {
    if (n < 2) return false;
    return j.rises > 0 && j.last_high >= n - std::min(flat_tail(n), n - 1);
}

SiteJudgement judge_site(std::span<const double> aged, std::span<const double> held, size_t min_steps) {
    return SiteJudgement{judge(aged, min_steps), judge(held, min_steps)};
}

PoolJudgement judge_pool(std::span<const double> in_use, double pool_growth, double driver_growth, size_t min_steps) {
    return PoolJudgement{judge(in_use, min_steps), pool_counts_for(driver_growth, pool_growth)};
}

std::optional<uint64_t> projected_oom_step(uint64_t step, uint64_t capacity, uint64_t peak, double rate) {
    if (rate <= 0 || capacity == 0) return std::nullopt;
    const double headroom = capacity > peak ? double(capacity - peak) : 0;
    return step + uint64_t(std::ceil(headroom / rate));
}

}  // namespace vramscope
