// Everything the process holds, reconciled with what the driver says it uses. Per device, at the
// last judged step end that read NVML (the last full step end where none did):
//   NVML's figure = torch's reserved bytes + each holder's own device memory (analysis/libraries.h)
//                 + the CUDA context and module images + the driver's pages + unexplained, exactly.
// The context is NVML's residual (its figure less torch's reserved and the libraries' bytes, as the
// trace held them when it was read) at the first judged step end, the end of warm-up; of what the
// residual gained since, the change of what the driver's 2 MiB pages of the outside allocations
// hold beyond their bytes accounts for some (analysis/driver_pages.h), and the rest is
// unexplained. Past unexplained_allowance() (analysis/ledger.h) of NVML's own growth, at the last
// reading within the judged steps, the ledger's, or the one at close unless the last step end's
// own reading bounds the judged steps, no verdict may be "no leak".
// Pinned host memory is the host's, by holder, with no NVML figure. docs/findings.md says the same.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "analysis/replay.h"
#include "findings/findings.h"

namespace vramscope {

struct Usage {
    std::vector<UsageLedger> ledgers;         // by device, then the host when it holds pinned memory
    std::vector<std::string> unexplained;     // a sentence per device whose residual grew past its allowance
    // Said beside the verdict, a sentence each: a device whose readings could check nothing, and
    // growth no recorded allocation explains that the reading at close shows after the last step
    // end (of the unfinished step, which no verdict is of).
    std::vector<std::string> notes;
    uint64_t context(uint16_t device) const;  // the device's context, 0 where NVML was not read
};

// `devices`' timelines, their NVML readings (Replay::nvml) and the replay's holders, written down to
// the end (HeldSeries::record_held); `first`: the first judged step end, `last`: the last full
// step's; `judged`: whether the steps between are judged (else no growth is held against the verdict).
// `pools`: the libraries' own counts of their pools, written down alike: each splits its library's
// part into what is in use and what its pool keeps cached (LibraryBytes::in_use, cached).
Usage usage_ledgers(const std::vector<DeviceSummary>& devices, const std::vector<std::vector<NvmlReading>>& readings,
                    const std::vector<HolderSeries>& holders, size_t first, size_t last, bool judged,
                    const std::vector<PoolSeries>& pools = {});

// What the input could not show of the process's memory, said plainly: a torch snapshot's, or a
// capture's that says (trace meta "capture.driver", "capture.nvml") what it did not record.
std::vector<std::string> unseen_memory_notes(const Trace& t);

}  // namespace vramscope
