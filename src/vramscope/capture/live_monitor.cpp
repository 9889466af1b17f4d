#include "capture/live_monitor.h"

#include <algorithm>
#include <cmath>

#include "analysis/fit.h"

namespace vramscope::capture {

void LiveMonitor::alloc(uint8_t device, uint64_t addr, uint64_t size, uint32_t site) {
    release(device, addr);  // a block never freed before its address came back: its free was missed
    uint32_t slot;
    if (free_slots_.empty()) {
        slot = uint32_t(blocks_.size());
        blocks_.push_back(Block{size, site, device});
    } else {
        slot = free_slots_.back();
        free_slots_.pop_back();
        blocks_[slot] = Block{size, site, device};
    }
    live_.put(key(device, addr), slot);
    held_[key(device, site)] += int64_t(size);
    Device& d = devices_[device];
    d.allocated += int64_t(size);
    d.peak = std::max(d.peak, d.allocated);
}

void LiveMonitor::release(uint8_t device, uint64_t addr) {
    const uint32_t slot = live_.take(key(device, addr));
    if (slot == AddressMap::kMissing) return;  // allocated before capture began
    const Block& b = blocks_[slot];
    held_[key(device, b.site)] -= int64_t(b.size);
    devices_[device].allocated -= int64_t(b.size);
    free_slots_.push_back(slot);
}

void LiveMonitor::set_capacity(uint8_t device, uint64_t bytes) { devices_[device].capacity = bytes; }

std::optional<LiveLeak> LiveMonitor::judge(uint8_t device, uint32_t site, const Series& s) const {
    const size_t n = std::min(s.count, kHistory);
    if (n < kMinSteps || s.reported) return std::nullopt;
    // Judged only at a step that added to what the site holds: most steps cost two loads.
    if (s.held[(s.count - 1) % kHistory] <= s.held[(s.count - 2) % kHistory]) return std::nullopt;
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = s.held[(s.count - n + i) % kHistory];
    if (v.back() < *std::max_element(v.begin(), v.end())) return std::nullopt;
    size_t rises = 0;
    for (size_t i = 1; i < n; ++i) rises += v[i] > v[i - 1];
    const LineFit all = fit_line(v, 0, n - 1);
    const LineFit late = fit_line(v, n / 2, n - 1);
    const double span = double(n - 1);
    // The same tests as the full analysis (analyze.cpp), on the window the monitor keeps.
    if (rises < 3 || all.slope < 512 || all.r2 < 0.9 || late.slope < 0.5 * all.slope ||
        v.back() - v.front() < 0.5 * all.slope * span)
        return std::nullopt;
    LiveLeak leak{device, site, all.slope, step_ - n};
    for (size_t i = n - 1; i-- > 0;)
        if (v[i] < v[i + 1]) leak.first_step = step_ - (n - 1 - i); else break;
    return leak;
}

std::vector<LiveLeak> LiveMonitor::end_step() {
    ++step_;
    std::vector<LiveLeak> found;
    if (step_ > kWarmupSteps) {
        for (const auto& [k, bytes] : held_) {
            auto it = series_.find(k);
            if (it == series_.end()) {
                if (bytes <= 0) continue;
                it = series_.emplace(k, Series{}).first;
                it->second.since_step = step_;
            }
            Series& s = it->second;
            s.held[s.count % kHistory] = double(std::max<int64_t>(0, bytes));
            ++s.count;
            const uint8_t device = uint8_t(k >> 56);
            if (auto leak = judge(device, uint32_t(k), s)) {
                s.reported = true;
                found.push_back(*leak);
            }
        }
    }
    for (const LiveLeak& leak : found) devices_[leak.device].leak_rate += leak.bytes_per_step;
    for (LiveLeak& leak : found) {
        const Device& d = devices_[leak.device];
        if (d.capacity > uint64_t(d.peak))
            leak.projected_oom_step = step_ + uint64_t(std::ceil(double(d.capacity - uint64_t(d.peak)) / d.leak_rate));
    }
    for (Device& d : devices_) d.peak = d.allocated;
    return found;
}

}  // namespace vramscope::capture
