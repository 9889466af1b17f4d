// Whether a trace's content can be judged at all. Readers count what they find wrong while they
// read (a FaultTally); validate_events() then checks the events themselves. Both add to
// Trace::faults, and analysis gives no verdict for a trace with faults.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <algorithm>
#include <array>

#include "common/address_map.h"
#include "events/trace.h"

namespace vramscope {

// Counts of one kind of problem each ("trace entries whose size is negative": 3), so that a
// million bad entries make one line, not a million.
class FaultTally {
public:
    void add(std::string_view what, size_t n = 1) { counts_[std::string(what)] += n; }
    bool empty() const { return counts_.empty(); }
    // Appends "NAME: N WHAT" for each, in a stable order.
    void into(std::vector<std::string>& out, const std::string& name) const;

private:
    std::map<std::string, size_t> counts_;
};

// Sizes at or above this are no allocation a GPU can make: a negative number read as unsigned,
// or a corrupt field. Live bytes on a device stay under it too, and times (µs since the epoch)
// under kLatestTime: so analysis of a trusted trace cannot overflow.
inline constexpr uint64_t kImpossibleSize = uint64_t(1) << 50;  // 1 PiB
inline constexpr int64_t kLatestTime = int64_t(1) << 56;        // the year 4253

// A block outside torch's allocator (is_external_event): matched by its address alone, as a
// buffer may be given back from another device's context, and pinned host memory apart from
// device memory (a VMM handle is no address at all). Replay and validation key them alike.
inline bool is_pinned_event(EventKind k) { return k == EventKind::pinned_alloc || k == EventKind::pinned_free; }
inline uint64_t external_key(bool pinned, uint64_t addr) { return addr ^ (pinned ? uint64_t(1) << 63 : 0); }

// A device capacity or baseline of 1 PiB or more, a capacity below what the trace itself has live on it, an alloc at an address already live on its device, impossible sizes,
// more than kImpossibleSize live at once, times out of range; outside torch's allocator, an
// allocation at an address already live, and a free of an address never allocated (a capture
// records only the frees of what it saw allocated) or of another size. Memory: the live blocks, what
// analysis keeps anyway. Fed the events as they stream by; analysis stops at the first fault.
class EventValidator {
public:
    // One event, checked on its own and against the live blocks this validator keeps.
    void see(const Trace& t, const Event& e);
    bool faulted() const { return !tally_.empty(); }
    // Adds what it found to t.faults.
    void finish(Trace& t);

    // The same checks for a caller that keeps the live blocks itself (the replay: one lookup
    // serves both). check_fields() checks what needs no live blocks and says whether the event
    // goes on to them; the caller then reports what its lookup found, in the events' order.
    // Inline: it runs once per event.
    bool check_fields(const Trace& t, const Event& e) {
        if (devices_seen_ < t.devices.size()) see_devices(t);
        if (e.time_us < 0 || e.time_us >= kLatestTime) fault("events with a time before 1970 or after 4253");
        if (is_pool_reading(e.kind) && (e.size >= kImpossibleSize || e.addr >= kImpossibleSize))
            fault("pool readings of 1 PiB or more (negative or corrupt)");
        if (!carries_address(e.kind)) return false;
        if (e.size >= kImpossibleSize) {
            fault("events with a size of 1 PiB or more (negative or corrupt)");
            return false;
        }
        // Any sum analysis makes is over a part of these: under 2^62, none can overflow. NVML's
        // figure is never summed, only compared: a long run reads it every step.
        if (e.kind != EventKind::device_usage && (size_total_ += e.size) >= uint64_t(1) << 62)
            fault("events whose sizes sum past 2^62 bytes");
        return true;
    }
    void check_addresses(const Event& e);  // the rest, against its own live blocks
    void allocated(const Event& e) {        // a new live block
        uint64_t& live = live_bytes_[e.device];
        if ((live += e.size) >= kImpossibleSize) fault("allocations past 1 PiB live on a device");
        peak_live_bytes_[e.device] = std::max(peak_live_bytes_[e.device], live);
    }
    // An alloc where a block is live (the first stays).
    void allocated_again() { fault("allocations at an address already allocated and not freed"); }
    void released(uint8_t device, uint64_t size) { live_bytes_[device] -= size; }  // a live block freed
    // The caller's live blocks, from which the validator goes on alone (check_addresses()).
    void adopt(uint64_t key, uint64_t size) { live_.put(key, size); }

    // Memory outside torch's allocator, as the caller's lookup found it (external_key()).
    void external_allocated_again() { fault("allocations outside torch's allocator at an address already allocated and not freed"); }
    void external_freed_unknown() { fault("frees outside torch's allocator of an address the trace never saw allocated"); }
    void external_freed_other_size() { fault("frees outside torch's allocator whose size is not their allocation's"); }
    void adopt_external(uint64_t key, uint64_t size) { external_.put(key, size); }

private:
    void see_devices(const Trace& t);
    // Out of line: the message's string would make every inline check save all registers.
    [[gnu::noinline]] void fault(std::string_view what) { tally_.add(what); }
    FaultTally tally_;
    AddressMapOf<uint64_t> live_{4096};  // block_key() -> size, of each live block
    AddressMapOf<uint64_t> external_{64};  // external_key() -> size, outside torch's allocator
    std::array<uint64_t, 256> live_bytes_{};  // by device
    std::array<uint64_t, 256> peak_live_bytes_{};  // by device: no capacity may be below it
    uint64_t size_total_ = 0;
    size_t devices_seen_ = 0;
};

// The same over a trace in memory.
void validate_events(Trace& t);

}  // namespace vramscope
