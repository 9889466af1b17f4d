#include "findings/shown.h"

#include <algorithm>
#include <map>

namespace vramscope {
namespace {

// The `cap` entries with the largest `size`, the rest counted; entries that `belongs` rejects are
// neither shown nor counted. Ties keep the list's order, and the shown keep it too.
template <class T, class Size, class Belongs>
Shown largest(const std::vector<T>& all, size_t cap, Size size, Belongs belongs) {
    Shown s;
    for (size_t i = 0; i < all.size(); ++i)
        if (belongs(all[i])) s.entries.push_back(i);
    if (s.entries.size() <= cap) return s;
    std::stable_sort(s.entries.begin(), s.entries.end(), [&](size_t a, size_t b) { return size(all[a]) > size(all[b]); });
    for (size_t k = cap; k < s.entries.size(); ++k) s.rest_total += double(size(all[s.entries[k]]));
    s.rest = s.entries.size() - cap;
    s.entries.resize(cap);
    std::sort(s.entries.begin(), s.entries.end());
    return s;
}

constexpr auto kEvery = [](const auto&) { return true; };

}  // namespace

bool Shown::shows(size_t index) const { return std::binary_search(entries.begin(), entries.end(), index); }

bool ShownDevices::shows(uint16_t device) const { return std::binary_search(devices.begin(), devices.end(), device); }

Shown shown_leaks(const std::vector<SiteFinding>& leaks, size_t cap) {
    return largest(leaks, cap, [](const SiteFinding& l) { return l.bytes_per_step; }, kEvery);
}

Shown shown_within_step(const std::vector<WithinStepLeak>& leaks, size_t cap) {
    return largest(leaks, cap, [](const WithinStepLeak& l) { return l.bytes_per_unit; }, kEvery);
}

std::array<Shown, kNotLeakKinds> shown_not_leaks(const std::vector<NotLeak>& not_leaks, size_t cap) {
    std::array<Shown, kNotLeakKinds> by_kind;
    for (size_t k = 0; k < kNotLeakKinds; ++k)
        by_kind[k] = largest(not_leaks, cap, [](const NotLeak& n) { return n.bytes; },
                             [k](const NotLeak& n) { return size_t(n.kind) == k; });
    return by_kind;
}

// A device is known by its summary, its ledger, its peak or its usage: the highest peaks are shown.
ShownDevices shown_devices(const Findings& f, size_t cap) {
    std::map<uint16_t, uint64_t> peak_of;
    for (const DeviceSummary& d : f.devices) peak_of[d.device];
    for (const DeviceLedger& l : f.ledger) peak_of[l.device];
    for (const UsageLedger& u : f.usage)
        if (u.device) peak_of[*u.device];
    for (const DevicePeak& p : f.peaks) peak_of[p.device] = std::max(peak_of[p.device], p.bytes);
    ShownDevices s;
    for (const auto& [device, peak] : peak_of) s.devices.push_back(device);
    if (s.devices.size() <= cap) return s;
    std::stable_sort(s.devices.begin(), s.devices.end(), [&](uint16_t a, uint16_t b) { return peak_of[a] > peak_of[b]; });
    s.rest = s.devices.size() - cap;
    s.devices.resize(cap);
    std::sort(s.devices.begin(), s.devices.end());
    return s;
}

}  // namespace vramscope
