#include "analysis/ranks.h"

#include <algorithm>
#include <cstdlib>

#include "common/format.h"

namespace vramscope {
namespace {

int rank_of(const Findings& f) {
    const std::string value(f.meta_value("rank"));
    return !value.empty() && value.find_first_not_of("0123456789") == std::string::npos ? std::atoi(value.c_str()) : -1;
}

}  // namespace

RankComparison compare_ranks(const std::vector<Findings>& runs) {
    RankComparison c;
    for (size_t i = 0; i < runs.size(); ++i) {
        const int rank = rank_of(runs[i]);
        if (rank < 0) continue;
        RankRow row{rank, i, runs[i].leak_bytes_per_step};
        for (const DeviceSummary& d : runs[i].devices) {
            if (d.timeline.empty()) continue;
            row.allocated += d.timeline.back().allocated;
            for (const StepPoint& p : d.timeline) row.peak_allocated = std::max(row.peak_allocated, p.peak_allocated);
        }
        c.rows.push_back(row);
    }
    if (c.rows.size() < 2) return RankComparison{};
    std::sort(c.rows.begin(), c.rows.end(), [](const RankRow& a, const RankRow& b) { return a.rank < b.rank; });

    std::string leaking, clean;
    for (const RankRow& r : c.rows) (r.leak_bytes_per_step > 0 ? leaking : clean) += " " + std::to_string(r.rank);
    if (!leaking.empty() && !clean.empty())
        c.skew.push_back("only some ranks leak: rank" + leaking + " leak" + (leaking.size() > 2 ? "" : "s") +
                         ", rank" + clean + " do" + (clean.size() > 2 ? "" : "es") + " not");
    auto [low_rate, high_rate] = std::minmax_element(c.rows.begin(), c.rows.end(), [](auto& a, auto& b) {
        return a.leak_bytes_per_step < b.leak_bytes_per_step;
    });
    if (low_rate->leak_bytes_per_step > 0 && high_rate->leak_bytes_per_step > 2 * low_rate->leak_bytes_per_step)
        c.skew.push_back("leak rates differ: rank " + std::to_string(high_rate->rank) + " +" +
                         format_bytes(high_rate->leak_bytes_per_step) + "/step, rank " +
                         std::to_string(low_rate->rank) + " +" + format_bytes(low_rate->leak_bytes_per_step) + "/step");
    auto [low, high] = std::minmax_element(c.rows.begin(), c.rows.end(),
                                           [](auto& a, auto& b) { return a.peak_allocated < b.peak_allocated; });
    // Ranks of one job hold the same model and batch shapes: a peak 10% (and 64 MiB) apart is
    // uneven work or state, and the highest rank is the one that will run out first.
    if (double(high->peak_allocated) > 1.1 * double(low->peak_allocated) &&
        high->peak_allocated - low->peak_allocated >= (64ull << 20))
        c.skew.push_back("peak memory differs: rank " + std::to_string(high->rank) + " " +
                         format_bytes(double(high->peak_allocated)) + ", rank " + std::to_string(low->rank) + " " +
                         format_bytes(double(low->peak_allocated)) + "; the highest rank runs out first");
    return c;
}

}  // namespace vramscope
