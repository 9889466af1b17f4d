#include "analysis/within_step.h"

namespace vramscope {

std::optional<WithinStepRecord> judge_units(const UnitSeries& series, int64_t live, uint32_t units, uint32_t step,
                                            uint32_t stack, uint32_t unit_marker) {
    if (units < kMinSteps) return std::nullopt;
    std::vector<double> at_end(units, double(series.at_start));
    for (size_t i = 0; i < series.held.size(); ++i) {
        const uint32_t to = i + 1 < series.held.size() ? series.held[i + 1].first : series.touched;
        for (uint32_t u = series.held[i].first; u < to && u < units; ++u) at_end[u] = double(series.held[i].second);
    }
    for (uint32_t u = series.touched; u < units; ++u) at_end[u] = double(live);
    if (at_end.back() <= at_end.front()) return std::nullopt;
    const Judgement j = judge(at_end, kMinSteps);
    if (!is_leak(j.shape) || j.varies() || j.bytes_per_step < kMinLeakRate) return std::nullopt;
    return WithinStepRecord{j.bytes_per_step, j.r2, units, step, unit_marker, 1, stack,
                            int64_t(at_end.back()) - series.at_start, int64_t(at_end.front())};
}

void keep_worst(std::optional<WithinStepRecord>& record, const WithinStepRecord& step) {
    const uint32_t seen = record ? record->steps_seen + 1 : 1;
    if (!record || step.bytes_per_unit > record->bytes_per_unit) record = step;
    record->steps_seen = seen;
}

}  // namespace vramscope
