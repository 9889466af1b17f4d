// Which entries a person's view shows, apart from how each renderer draws them: the largest few of
// each kind, then one line counting the rest, so that the terminal summary (about 120 lines at most)
// and the HTML report stay short whatever the trace. The findings JSON keeps every entry.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "findings/findings.h"

namespace vramscope {

struct ShownCaps {
    size_t leaks;               // leak sites, the largest rate first
    size_t within_step;         // leaks inside a step, the largest rate first
    size_t not_leaks_per_kind;  // of each kind of growth that is not a leak: bounded caches, warm-up, ...
    size_t devices;             // the devices whose ledger, peak and usage are drawn: the highest peaks
};
inline constexpr ShownCaps kSummaryShown{5, 5, 5, 4};
// The page draws a chart per device and an area per leak site: more fits, but not without end.
inline constexpr ShownCaps kReportShown{40, 40, 40, 16};

// Of one list, the entries shown (their indices, in the list's order) and what the others add up to.
struct Shown {
    std::vector<size_t> entries;
    size_t rest = 0;
    double rest_total = 0;  // bytes, or bytes per step for leaks
    bool shows(size_t index) const;
};

Shown shown_leaks(const std::vector<SiteFinding>& leaks, size_t cap);
Shown shown_within_step(const std::vector<WithinStepLeak>& leaks, size_t cap);
// One for each NotLeakKind, by its value: the largest `cap` entries of that kind.
std::array<Shown, kNotLeakKinds> shown_not_leaks(const std::vector<NotLeak>& not_leaks, size_t cap);

struct ShownDevices {
    std::vector<uint16_t> devices;  // ascending
    size_t rest = 0;
    bool shows(uint16_t device) const;
};
ShownDevices shown_devices(const Findings& f, size_t cap);

}  // namespace vramscope
