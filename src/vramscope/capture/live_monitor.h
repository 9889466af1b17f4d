// Judges a run while it goes, so a leak is reported before the run ends (or OOMs). It keeps what
// the full analysis would need only for the last steps: the live blocks, and per allocation
// site the bytes it held at each of the last 64 step ends. Memory follows live blocks and sites,
// never the length of the run. The full analysis of the trace file still has the last word.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "analysis/flat_map.h"

namespace vramscope::capture {

struct LiveLeak {
    uint8_t device = 0;
    uint32_t site = 0;  // frame id in the recorder's table
    double bytes_per_step = 0;
    uint64_t first_step = 0;                 // first step of the rise that was judged
    std::optional<uint64_t> projected_oom_step;
};

class LiveMonitor {
public:
    static constexpr size_t kHistory = 64;  // step ends kept per site
    static constexpr size_t kMinSteps = 8;  // rising step ends needed before a leak is called
    static constexpr size_t kWarmupSteps = 3;

    void alloc(uint8_t device, uint64_t addr, uint64_t size, uint32_t site);
    void release(uint8_t device, uint64_t addr);
    void set_capacity(uint8_t device, uint64_t bytes);
    // Closes a step; returns the sites confirmed as leaking at this step (each site once).
    std::vector<LiveLeak> end_step();
    uint64_t steps() const { return step_; }

private:
    struct Block {
        uint64_t size;
        uint32_t site;
        uint8_t device;
    };
    struct Series {
        std::array<double, kHistory> held{};  // ring: bytes at step ends
        size_t count = 0;                     // step ends recorded (ring holds the last kHistory)
        uint64_t since_step = 0;              // step of the first recorded end
        bool reported = false;
    };
    struct Device {
        int64_t allocated = 0, peak = 0;
        uint64_t capacity = 0;
        double leak_rate = 0;  // of the leaks confirmed so far: what the OOM projection uses
    };
    static uint64_t key(uint8_t device, uint64_t value) { return value ^ uint64_t(device) << 56; }
    std::optional<LiveLeak> judge(uint8_t device, uint32_t site, const Series& s) const;

    AddressMap live_{4096};                             // by device and address -> index in blocks_
    std::vector<Block> blocks_;
    std::vector<uint32_t> free_slots_;                  // of blocks_, for reuse: no allocation per event
    std::unordered_map<uint64_t, int64_t> held_;        // by device and site: live bytes now
    std::unordered_map<uint64_t, Series> series_;       // by device and site, once a step end saw bytes
    std::array<Device, 256> devices_{};
    uint64_t step_ = 0;
};

}  // namespace vramscope::capture
