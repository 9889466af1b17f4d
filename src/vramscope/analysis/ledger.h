// Every byte of growth accounted for. A device's allocated bytes at step ends grow by G from the
// end of the first full step to the end of the last; each allocation site's holdings change by
// its own delta over the same span, and the deltas, with what blocks from before the trace gave
// back, sum to G exactly. Each site's delta goes to one part, by what the judge said of it:
// - leak: a leak the findings confirm (judge.h confirmed(): confidence >= kConfirmedAt);
// - bounded-cache: its survivors rose to a bound (survivor evidence, never the batch in hand);
// - warm-up: no rise once warm-up was over, or a single rise to a level it never passed again;
// - variation: it rose and fell at step ends: no new high at the end, or it gave back more than
//   a quarter of what it gained, or no line fits it (R² < 0.5): activations and batches of
//   varying size held across a step end;
// - unexplained: anything else that rose: a leak not confirmed, a trend under the judge's floor,
//   a rise in the last steps, too few steps to tell.
// What is left over is blocks allocated before the trace and freed in it (before-trace); a gain
// left over is unexplained. "no leak" may stand beside at most unexplained_allowance(G) of
// unexplained growth on any device; past it the verdict is a leak or "cannot judge", never
// "no leak" (docs/findings.md says the same).
#pragma once
#include <cstdint>

#include "analysis/judge.h"
#include "findings/findings.h"

namespace vramscope {

inline constexpr int64_t kUnexplainedFloor = int64_t(1) << 20;  // 1 MiB
inline constexpr double kUnexplainedShare = 0.02;               // of the device's growth

// Unexplained growth a "no leak" may stand beside on one device: max(1 MiB, 2% of its growth).
int64_t unexplained_allowance(int64_t growth);

// The part a site's delta belongs to; `n` step ends were judged; `confirmed`: a leak the findings
// report with confidence >= kConfirmedAt (judge.h).
LedgerPart ledger_part(const SiteJudgement& j, size_t n, bool confirmed);

// Adds up one device's ledger as the sites' deltas come, and closes it on the measured growth.
class LedgerBuilder {
public:
    LedgerBuilder(uint16_t device, uint64_t from_step, uint64_t to_step, uint64_t allocated_from, uint64_t allocated_to);
    void add(LedgerPart part, int64_t delta, const SourceLine& site);
    // The rest of the measured growth goes to before-trace (a loss) or unexplained (a gain).
    DeviceLedger finish();

private:
    DeviceLedger ledger_;
};

}  // namespace vramscope
