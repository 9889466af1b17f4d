// What a candidate fix did, from the numbers against its mode's baseline, never from its name.
// The thresholds are the policy; docs/compare.md states them.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "compare/cells.h"

namespace vramscope {

enum class CellStatus : uint8_t {
    baseline,   // the row the others are measured against
    fix,        // the leak is gone: at most kFixAtMost of the baseline's rate, and no OOM
    partial,    // the leak is smaller: at most kPartialAtMost of the baseline's rate
    no_effect,  // within the noise of the baseline's rate (or no leak either way)
    worse,      // at least kWorseAtLeast of the baseline's rate, or a leak where the baseline had none
    lower_peak,   // no effect on the leak, and the peak lower by at least peak_change_bar() of the baseline's
    higher_peak,  // no effect on the leak, and the peak higher by as much
    broken,     // crashed, timed out, not run, or out of memory where the baseline was not
    unknown,    // this cell or its baseline could not be judged
};
std::string_view name(CellStatus s);

inline constexpr double kFixAtMost = 0.05;
inline constexpr double kPartialAtMost = 0.80;
inline constexpr double kWorseAtLeast = 1.20;
// A peak moves when it moves by at least max(kPeakShare of the baseline's, kPeakBytes).
inline constexpr double kPeakShare = 0.05;
inline constexpr uint64_t kPeakBytes = 64ull << 20;
// A change of bytes as the compare and diff tables say it: "+1.2 GiB", "-927.1 MiB".
std::string signed_bytes(double bytes);
inline double peak_change_bar(uint64_t baseline_peak) { return std::max(kPeakShare * double(baseline_peak), double(kPeakBytes)); }

struct CellJudgement {
    CellStatus status = CellStatus::unknown;
    double saved_bytes = 0;  // growth saved over the baseline's steps: (baseline rate - this rate) × steps
    std::string why;         // one short clause: "rate 48% of the baseline's", "exit code 1"
};

CellJudgement judge_against(const CellResult& cell, const CellResult& baseline);

}  // namespace vramscope
