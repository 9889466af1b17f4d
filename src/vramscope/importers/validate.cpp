#include "importers/validate.h"

#include <unordered_map>

namespace vramscope {

void FaultTally::into(std::vector<std::string>& out, const std::string& name) const {
    for (const auto& [what, n] : counts_) out.push_back(name + ": " + std::to_string(n) + " " + what);
}

void validate_events(Trace& t) {
    FaultTally tally;
    std::unordered_map<uint64_t, uint64_t> live;  // (device << 56) ^ address -> size, of each live block
    std::unordered_map<uint16_t, uint64_t> live_bytes;
    // A device's capacity and baselines (from the file's header records) count like sizes.
    uint64_t size_total = 0;
    for (const DeviceInfo& d : t.devices) {
        for (uint64_t bytes : {d.total_memory, d.baseline_allocated, d.baseline_reserved}) {
            if (bytes >= kImpossibleSize) tally.add("devices with a capacity or baseline of 1 PiB or more");
            else size_total += bytes;
        }
    }
    for (const Event& e : t.events) {
        if (e.time_us < 0 || e.time_us >= kLatestTime) tally.add("events with a time before 1970 or after 4253");
        if (!carries_address(e.kind)) continue;
        if (e.size >= kImpossibleSize) {
            tally.add("events with a size of 1 PiB or more (negative or corrupt)");
            continue;
        }
        // Any sum analysis makes is over a part of these: under 2^62, none can overflow.
        if ((size_total += e.size) >= uint64_t(1) << 62) tally.add("events whose sizes sum past 2^62 bytes");
        const uint64_t key = uint64_t(e.device) << 56 ^ e.addr;
        switch (e.kind) {
        case EventKind::alloc:
            if (!live.try_emplace(key, e.size).second) tally.add("allocations at an address already allocated and not freed");
            else if ((live_bytes[e.device] += e.size) >= kImpossibleSize) tally.add("allocations past 1 PiB live on a device");
            break;
        case EventKind::free_completed:
        case EventKind::free:
            if (auto it = live.find(key); it != live.end()) {  // a block from before the trace began is fine
                live_bytes[e.device] -= it->second;
                live.erase(it);
            }
            break;
        default: break;
        }
    }
    tally.into(t.faults, t.source);
}

}  // namespace vramscope
