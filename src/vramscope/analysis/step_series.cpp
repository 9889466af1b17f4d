#include "analysis/step_series.h"

#include <algorithm>
#include <array>

#include "analysis/judge.h"

namespace vramscope {

// The recent fit (judge.h) reads the last kRecentSteps step ends: always runs, never a bucket.
static_assert(StepSeries::kBucketRuns >= kRecentSteps);

Stretch Stretch::run(uint32_t from, uint32_t to, double value) {
    Stretch s;
    s.from = from;
    s.to = to;
    s.first = s.last = s.high = s.mean = value;
    s.high_at = from;
    return s;
}

void Stretch::append(const Stretch& next) {
    const bool rise = next.first > last;
    if (rise) {
        ++rises;
        gained += next.first - last;
        if (first_rise == kNone) first_rise = next.from;
    } else {
        given_back += last - next.first;
    }
    rises += next.rises;
    gained += next.gained;
    given_back += next.given_back;
    if (first_rise == kNone) first_rise = next.first_rise;
    if (next.last_rise != kNone) last_rise = next.last_rise;
    else if (rise) last_rise = next.from;
    const bool climbs_throughout = next.climb + 1 == next.steps();
    climb = climbs_throughout && rise ? next.climb + 1 + climb : next.climb;
    if (next.high > high) high = next.high, high_at = next.high_at;
    // Moments of the two about their joint mean (Chan, Golub and LeVeque's pairwise update).
    const double a = double(steps()), b = double(next.steps()), n = a + b;
    const double gap = next.mean - mean, apart = next.middle() - middle();
    mean = (a * mean + b * next.mean) / n;
    spread += next.spread + gap * gap * a * b / n;
    co += next.co + apart * gap * a * b / n;
    to = next.to;
    last = next.last;
}

Stretch Stretch::part(uint32_t a, uint32_t b) const { return run(a, b, mean); }

Stretch merged(std::span<const Stretch> pieces) {
    Stretch all = pieces.front();
    for (size_t i = 1; i < pieces.size(); ++i) all.append(pieces[i]);
    return all;
}

// fit_line()'s two passes, a stretch at a time: its values' sum, then their moments about the
// means, each stretch's own moments and its mean's offset.
LineFit fit_stretches(std::span<const Stretch> pieces) {
    LineFit f;
    if (pieces.empty()) return f;
    const uint32_t from = pieces.front().from, to = pieces.back().to;
    if (to <= from) return f;
    const double n = double(to) - double(from) + 1;
    double sy = 0;
    for (const Stretch& p : pieces) sy += p.mean * double(p.steps());
    const double mx = (double(from) + double(to)) / 2, my = sy / n;
    double sxy = 0, syy = 0;
    for (const Stretch& p : pieces) {
        const double dy = p.mean - my, steps = double(p.steps());
        sxy += p.co + steps * (p.middle() - mx) * dy;
        syy += p.spread + steps * dy * dy;
    }
    const double sxx = n * (n * n - 1) / 12;
    f.slope = sxy / sxx;
    f.intercept = my - f.slope * (mx - double(from));
    f.r2 = syy > 0 ? (sxy * sxy) / (sxx * syy) : 0;
    return f;
}

std::vector<Stretch> cut(std::span<const Stretch> pieces, uint32_t a, uint32_t b) {
    std::vector<Stretch> out;
    for (const Stretch& p : pieces) {
        if (p.to < a || p.from > b) continue;
        out.push_back(p.from >= a && p.to <= b ? p : p.part(std::max(a, p.from), std::min(b, p.to)));
    }
    return out;
}

std::vector<Stretch> stretches_of(std::span<const double> values) {
    std::vector<Stretch> out;
    for (size_t i = 0; i < values.size(); ++i) {
        if (!out.empty() && out.back().last == values[i]) out.back().to = uint32_t(i);
        else out.push_back(Stretch::run(uint32_t(i), uint32_t(i), values[i]));
    }
    return out;
}

// The facts in one pass, the moments in a second about their mean: no division per run, as
// append() has, for every run of a busy series comes through here.
Stretch StepSeries::bucket_of(std::span<const Run> runs) {
    const size_t n = runs.size() - 1;
    Stretch s = Stretch::run(runs[0].from, runs[n].from - 1, runs[0].value);
    double sum = 0;
    for (size_t i = 0; i < n; ++i) {
        const double value = runs[i].value;
        const uint32_t from = runs[i].from, steps = runs[i + 1].from - from;
        sum += double(steps) * value;
        if (i == 0) continue;
        const double change = value - s.last;
        const bool rise = change > 0;
        s.rises += rise;
        s.gained += rise ? change : 0;
        s.given_back += rise ? 0 : -change;
        if (rise && s.first_rise == Stretch::kNone) [[unlikely]] s.first_rise = from;
        s.last_rise = rise ? from : s.last_rise;
        s.climb = rise && steps == 1 ? s.climb + 1 : 0;  // a longer run is flat inside
        const bool high = value > s.high;
        s.high = high ? value : s.high;
        s.high_at = high ? from : s.high_at;
        s.last = value;
    }
    s.mean = sum / double(s.steps());
    const double middle = s.middle();
    for (size_t i = 0; i < n; ++i) {
        const double dy = runs[i].value - s.mean, steps = double(runs[i + 1].from - runs[i].from);
        s.spread += steps * dy * dy;
        s.co += steps * ((double(runs[i].from) + double(runs[i + 1].from - 1)) / 2 - middle) * dy;
    }
    return s;
}

void StepSeries::close_bucket(uint32_t end) {
    std::array<Run, kBucketRuns + 1> runs;
    for (size_t i = 0, at = open_first_ % kRingRuns; i < kBucketRuns; ++i, at = at + 1 == kRingRuns ? 0 : at + 1) runs[i] = recent_[at];
    runs[kBucketRuns] = Run{end + 1, 0};
    if (last_closed_) {
        buckets_.push_back(*last_closed_);
        ring_first_ += kBucketRuns;
        if (buckets_.size() > kBuckets) {
            size_t narrowest = 0;
            for (size_t i = 1; i + 1 < buckets_.size(); ++i)
                if (buckets_[i].steps() + buckets_[i + 1].steps() < buckets_[narrowest].steps() + buckets_[narrowest + 1].steps())
                    narrowest = i;
            buckets_[narrowest].append(buckets_[narrowest + 1]);
            buckets_.erase(buckets_.begin() + ptrdiff_t(narrowest) + 1);
        }
    }
    last_closed_ = bucket_of(runs);
    open_first_ += kBucketRuns;
}

double StepSeries::at_end(size_t k) const {
    const auto value_at = [k](const std::vector<Run>& runs) {
        const auto after = std::upper_bound(runs.begin(), runs.end(), k, [](size_t step, const Run& r) { return step < r.from; });
        return after == runs.begin() ? 0.0 : std::prev(after)->value;
    };
    if (written_ && k >= recent_[ring_first_ % kRingRuns].from) {
        double value = 0;
        for (uint64_t i = ring_first_; i < written_ && recent_[i % kRingRuns].from <= k; ++i) value = recent_[i % kRingRuns].value;
        return value;
    }
    if (!buckets_.empty() && k >= buckets_.front().from) {
        const auto after = std::upper_bound(buckets_.begin(), buckets_.end(), k,
                                            [](size_t step, const Stretch& s) { return step < s.from; });
        return std::prev(after)->mean;
    }
    return value_at(head_);
}

std::vector<Stretch> StepSeries::stretches(uint32_t a, uint32_t b) const {
    std::vector<Stretch> out;
    const auto add = [&](const Stretch& s) {
        if (s.to < a || s.from > b) return;
        out.push_back(s.from >= a && s.to <= b ? s : s.part(std::max(a, s.from), std::min(b, s.to)));
    };
    // The run in hand: from `begin` on, until the next begins (0 from step 0 until the first change).
    uint64_t begin = 0;
    double value = 0;
    bool open = true;
    const auto close = [&](uint64_t next) {
        if (open && next > begin) add(Stretch::run(uint32_t(begin), uint32_t(next - 1), value));
    };
    const auto take = [&](const Run& r) {
        close(r.from);
        begin = r.from, value = r.value, open = true;
    };
    for (const Run& r : head_) take(r);
    for (const Stretch& s : buckets_) {
        close(s.from);
        add(s);
        open = false;
    }
    for (uint64_t i = ring_first_; i < written_; ++i) {
        const Run& r = recent_[i % kRingRuns];
        if (r.from > b) break;
        take(r);
    }
    close(uint64_t(b) + 1);
    return out;
}

}  // namespace vramscope
