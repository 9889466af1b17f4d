#include "importers/validate.h"

#include <unordered_set>

namespace vramscope {

void FaultTally::into(std::vector<std::string>& out, const std::string& name) const {
    for (const auto& [what, n] : counts_) out.push_back(name + ": " + std::to_string(n) + " " + what);
}

void validate_events(Trace& t) {
    FaultTally tally;
    std::unordered_set<uint64_t> live;  // (device << 56) ^ address of each live block
    size_t memory_events = 0;
    for (const Event& e : t.events) {
        if (!carries_address(e.kind)) continue;
        ++memory_events;
        if (e.kind != EventKind::oom && e.size >= kImpossibleSize) tally.add("events with a size of 1 PiB or more (negative or corrupt)");
        const uint64_t key = uint64_t(e.device) << 56 ^ e.addr;
        switch (e.kind) {
        case EventKind::alloc:
            if (!live.insert(key).second) tally.add("allocations at an address already allocated and not freed");
            break;
        case EventKind::free_completed:
        case EventKind::free: live.erase(key); break;  // a block from before the trace began is fine
        default: break;
        }
    }
    if (memory_events == 0 && t.faults.empty())
        t.faults.push_back(t.source + ": no memory events: nothing to judge (a torch snapshot needs "
                                      "torch.cuda.memory._record_memory_history() before the steps)");
    tally.into(t.faults, t.source);
}

}  // namespace vramscope
