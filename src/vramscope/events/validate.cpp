#include "events/validate.h"


namespace vramscope {

void FaultTally::into(std::vector<std::string>& out, const std::string& name) const {
    for (const auto& [what, n] : counts_) out.push_back(name + ": " + std::to_string(n) + " " + what);
}

// A device's capacity and baselines (from the file's header records) count like sizes.
void EventValidator::see_devices(const Trace& t) {
    for (; devices_seen_ < t.devices.size(); ++devices_seen_) {
        const DeviceInfo& d = t.devices[devices_seen_];
        for (uint64_t bytes : {d.total_memory, d.baseline_allocated, d.baseline_reserved}) {
            if (bytes >= kImpossibleSize) tally_.add("devices with a capacity or baseline of 1 PiB or more");
            else size_total_ += bytes;
        }
    }
}

void EventValidator::check_addresses(const Event& e) {
    const uint64_t key = block_key(e.device, e.addr);
    switch (e.kind) {
    case EventKind::external_alloc:
    case EventKind::pinned_alloc:
        if (const uint64_t before = external_.put(external_key(is_pinned_event(e.kind), e.addr), e.size); before != external_.kMissing) {
            external_.put(external_key(is_pinned_event(e.kind), e.addr), before);  // the first stays, as for torch's
            external_allocated_again();
        }
        break;
    case EventKind::external_free:
    case EventKind::pinned_free: {
        const uint64_t size = external_.take(external_key(is_pinned_event(e.kind), e.addr));
        if (size == external_.kMissing) external_freed_unknown();
        else if (size != e.size) external_freed_other_size();
        break;
    }
    case EventKind::alloc:
        // A live size is under kImpossibleSize, never the map's kMissing.
        if (const uint64_t before = live_.put(key, e.size); before != live_.kMissing) {
            live_.put(key, before);  // the first block stays the one its free will name
            allocated_again();
        } else {
            allocated(e);
        }
        break;
    case EventKind::free_completed:
    case EventKind::free:
        if (const uint64_t size = live_.take(key); size != live_.kMissing)  // a block from before the trace began is fine
            released(e.device, size);
        break;
    default: break;
    }
}

void EventValidator::see(const Trace& t, const Event& e) {
    if (check_fields(t, e)) check_addresses(e);
}

void EventValidator::finish(Trace& t) {
    see_devices(t);
    // A capacity of 1 byte would move the OOM projection to the first step.
    for (const DeviceInfo& d : t.devices)
        if (d.total_memory && d.total_memory < peak_live_bytes_[uint8_t(d.device)])
            tally_.add("devices with a capacity below the bytes the trace itself has live on them");
    tally_.into(t.faults, t.source);
}

void validate_events(Trace& t) {
    EventValidator v;
    for (const Event& e : t.events) v.see(t, e);
    v.finish(t);
}

}  // namespace vramscope
