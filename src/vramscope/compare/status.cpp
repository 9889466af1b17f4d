#include "compare/status.h"

#include <cmath>

#include "common/format.h"

namespace vramscope {
namespace {

bool ran_to_the_end(const CellResult& c) { return c.outcome == CellOutcome::finished && !c.oom_step; }
bool out_of_memory(const CellResult& c) { return c.outcome == CellOutcome::out_of_memory || c.oom_step.has_value(); }

std::string how_it_broke(const CellResult& c) {
    if (out_of_memory(c)) return c.oom_step ? "out of memory at step " + std::to_string(*c.oom_step) : "out of memory";
    if (!c.reason.empty()) return c.reason;  // the cell's own words: its failure, no CUDA, vramscope's error
    if (c.outcome == CellOutcome::failed && c.exit_code) return "exit code " + std::to_string(*c.exit_code);
    return std::string(name(c.outcome));
}

// A rate a status can be measured from: finite, not negative, and above 0 exactly when the
// verdict is LEAK (a LEAK at 0, or no leak at a rate, is a findings file that contradicts itself).
bool measurable(const CellResult& c) {
    const double r = c.leak_bytes_per_step;
    return std::isfinite(r) && r >= 0 && (r > 0) == (c.verdict == Verdict::leak);
}

std::string percent_of_baseline(double ratio) {
    return "rate " + format_percent(ratio) + " of the baseline's";
}


// "peak -7.0 GiB (-47%), activations -6.8 GiB": the change and the category that moved most.
std::string peak_words(const CellResult& cell, const CellResult& baseline) {
    const double change = double(cell.peak_allocated) - double(baseline.peak_allocated);
    std::string s = "peak " + signed_bytes(change) + " (" + (change < 0 ? "-" : "+") +
                    format_percent(std::fabs(change) / double(std::max<uint64_t>(1, baseline.peak_allocated))) + ")";
    size_t most = kPeakCategories;
    double moved = 0;
    for (size_t c = 0; c < kPeakCategories; ++c) {
        const double d = double(cell.peak_categories[c]) - double(baseline.peak_categories[c]);
        if (std::fabs(d) > std::fabs(moved)) moved = d, most = c;
    }
    if (most < kPeakCategories) s += ", " + std::string(name(PeakCategory(most))) + " " + signed_bytes(moved);
    return s;
}

// A row that leaves the leak as it was is judged by the peak it saves or adds.
CellJudgement by_peak(const CellResult& cell, const CellResult& baseline, double saved, const std::string& leak_words) {
    const double change = double(cell.peak_allocated) - double(baseline.peak_allocated);
    if (std::fabs(change) < peak_change_bar(baseline.peak_allocated)) return {CellStatus::no_effect, saved, leak_words};
    return {change < 0 ? CellStatus::lower_peak : CellStatus::higher_peak, saved, peak_words(cell, baseline)};
}

}  // namespace

std::string signed_bytes(double bytes) { return (bytes < 0 ? "-" : "+") + format_bytes(std::fabs(bytes)); }

std::string_view name(CellStatus s) {
    switch (s) {
        case CellStatus::baseline: return "baseline";
        case CellStatus::fix: return "root-cause fix";
        case CellStatus::partial: return "partial";
        case CellStatus::no_effect: return "no effect";
        case CellStatus::worse: return "worse";
        case CellStatus::lower_peak: return "lower peak";
        case CellStatus::higher_peak: return "higher peak";
        case CellStatus::broken: return "broken";
        case CellStatus::unknown: return "unknown";
    }
    return "?";
}

CellJudgement judge_against(const CellResult& cell, const CellResult& baseline) {
    // A baseline that did not run is broken as any row would be: nothing is measured against it.
    if (&cell == &baseline)
        return ran_to_the_end(cell) || out_of_memory(cell) ? CellJudgement{CellStatus::baseline, 0, ""}
                                                           : CellJudgement{CellStatus::broken, 0, how_it_broke(cell)};
    // A leak that kills the baseline kills a variant that changes nothing too: that is no effect,
    // not breakage. Out of memory counts against a variant only where the baseline survived.
    bool broke = !ran_to_the_end(cell) && !(out_of_memory(cell) && out_of_memory(baseline));
    if (broke) return {CellStatus::broken, 0, how_it_broke(cell)};
    if (!cell.analysed || cell.verdict == Verdict::cannot_judge)
        return {CellStatus::unknown, 0, cell.reason.empty() ? "could not be judged" : cell.reason};
    if (!baseline.analysed || baseline.verdict == Verdict::cannot_judge)
        return {CellStatus::unknown, 0, "the baseline could not be judged"};
    if (!measurable(cell)) return {CellStatus::unknown, 0, "its leak rate is not a measurement"};
    if (!measurable(baseline)) return {CellStatus::unknown, 0, "the baseline's leak rate is not a measurement"};
    const double base = baseline.leak_bytes_per_step, rate = cell.leak_bytes_per_step;
    const double saved = (base - rate) * double(baseline.steps);
    if (base <= 0) {
        if (rate <= 0) return by_peak(cell, baseline, 0, "no leak, as the baseline");
        return {CellStatus::worse, saved, "leaks where the baseline did not"};
    }
    const double ratio = rate / base;
    CellStatus status = ratio <= kFixAtMost       ? CellStatus::fix
                        : ratio <= kPartialAtMost ? CellStatus::partial
                        : ratio >= kWorseAtLeast  ? CellStatus::worse
                                                  : CellStatus::no_effect;
    if (status == CellStatus::fix && out_of_memory(cell))
        return {CellStatus::partial, saved, "still out of memory"};  // a fix lets the run finish
    if (status == CellStatus::no_effect) return by_peak(cell, baseline, saved, percent_of_baseline(ratio));
    return {status, saved, rate <= 0 ? "no leak left" : percent_of_baseline(ratio)};
}

}  // namespace vramscope
