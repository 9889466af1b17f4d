#include "analysis/ledger.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace vramscope {

int64_t unexplained_allowance(int64_t growth) {
    const double share = kUnexplainedShare * std::fabs(double(growth));
    return std::max(kUnexplainedFloor, int64_t(share));
}

LedgerPart ledger_part(const SiteJudgement& j, size_t n, bool confirmed) {
    if (confirmed) return LedgerPart::leak;
    if (j.aged.shape == Shape::bounded) return LedgerPart::bounded_cache;
    const Judgement& h = j.held;
    if (j.leaks() || h.shape == Shape::too_short) return LedgerPart::unexplained;
    if (h.rises == 0) return LedgerPart::warm_up;
    if (!new_high_at_end(h, n)) return h.rises == 1 ? LedgerPart::warm_up : LedgerPart::variation;
    if (h.varies() || (h.rises >= 2 && h.r2 < 0.5)) return LedgerPart::variation;
    return LedgerPart::unexplained;
}

LedgerBuilder::LedgerBuilder(uint16_t device, uint64_t from_step, uint64_t to_step, uint64_t allocated_from,
                             uint64_t allocated_to) {
    ledger_.device = device;
    ledger_.from_step = from_step;
    ledger_.to_step = to_step;
    ledger_.allocated_from = allocated_from;
    ledger_.allocated_to = allocated_to;
    ledger_.growth = int64_t(allocated_to) - int64_t(allocated_from);
}

void LedgerBuilder::add(LedgerPart part, int64_t delta, const SourceLine& site) {
    if (delta == 0) return;
    ledger_.parts[size_t(part)] += delta;
    if (part == LedgerPart::unexplained && delta > 0) ledger_.unexplained_sites.push_back(LedgerSite{site, delta});
}

DeviceLedger LedgerBuilder::finish() {
    const int64_t sites = std::accumulate(ledger_.parts.begin(), ledger_.parts.end(), int64_t(0));
    const int64_t rest = ledger_.growth - sites;
    if (rest > 0) ledger_.unexplained_sites.push_back(LedgerSite{SourceLine{"<blocks of no site>", 0, ""}, rest});
    ledger_.parts[size_t(rest > 0 ? LedgerPart::unexplained : LedgerPart::before_trace)] += rest;
    auto& u = ledger_.unexplained_sites;
    std::sort(u.begin(), u.end(), [](const LedgerSite& a, const LedgerSite& b) { return a.bytes > b.bytes; });
    if (u.size() > 5) u.resize(5);
    ledger_.unexplained_allowed = unexplained_allowance(ledger_.growth);
    return std::move(ledger_);
}

}  // namespace vramscope
