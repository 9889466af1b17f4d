// One pass over a trace's events in time order: the devices' step timelines and, per allocation
// site, the series the judge reads. It keeps the live blocks and what each site's series changes
// by, never the events: memory follows live blocks, sites and their changes, not the event count.
// Memory outside torch's allocator (a library's own device memory, pinned host memory) has sites
// and totals of its own: it is never in `allocated` or `reserved`.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis/peak.h"
#include "analysis/phases.h"
#include "analysis/sites.h"
#include "analysis/step_series.h"
#include "analysis/within_step.h"
#include "common/address_map.h"
#include "events/trace.h"
#include "findings/findings.h"
#include "events/validate.h"

namespace vramscope {

// One NVML reading as the trace holds it, with torch's reserved bytes and the memory outside its
// allocator as the trace held them when it was read. It stands for its step's end
// (StepPoint::nvml_used) only when neither changed after it; one that does not is still an
// observation of its own moment (analysis/usage.h).
struct NvmlReading {
    size_t step;  // the timeline point it was read in (the unfinished tail's, for one at close)
    uint64_t used;
    int64_t reserved, external;
    // How much more than `external` the driver's pages of that memory may read on NVML, at most
    // (analysis/driver_pages.h).
    int64_t page_rounding = 0;
    bool stands = false;  // for its point's end
    // What no recorded allocation holds then (negative when NVML lags a free).
    int64_t residual() const { return int64_t(used) - std::max<int64_t>(0, reserved) - std::max<int64_t>(0, external); }
};

// A block still live, with what its free will need.
struct LiveAlloc {
    uint64_t addr, size;
    uint64_t seq;       // allocation order: what keeps the findings' order that of the trace
    uint32_t stack;
    uint32_t site;      // index into Replay::sites
    uint32_t step;
    uint16_t stream;    // index into Trace::streams
    uint8_t device;
    uint8_t requested : 1;  // free_requested seen
    uint8_t phase : 2;      // the Phase it was allocated in
    uint8_t aged : 1;       // a survivor: counted in its site's `aged` series
    uint8_t freed : 1;      // its slot is free
    Phase allocated_in() const { return Phase(phase); }
};
static_assert(sizeof(LiveAlloc) == 40, "a live block's size bounds the replay's memory");

// Bytes held at step ends, written down only when they change (analysis/step_series.h).
struct HeldSeries {
    int64_t live = 0;                  // bytes live now
    double written = 0;                // the value written down last
    uint32_t touched = 0;              // step of the last change to `live`
    bool ever_touched = false;
    StepSeries held;                   // bytes held at step ends (0 before the first change)

    // Whether the value held since the last change is yet to be written down, before `step`
    // changes it (or ends); if so, it is `written` from now on.
    bool due(uint32_t step) {
        if (!ever_touched || touched >= step || written == double(live)) return false;
        written = double(live);
        return true;
    }
    // Writes it down.
    void record_held(uint32_t step) {
        if (due(step)) held.write(touched, written);
    }
    // The bytes held at the end of step k, once written down up to there.
    double at_end(size_t k) const { return held.at_end(k); }
};

// One allocation site on one device, of one memory (torch's and a library's own at one line stay
// apart): how its series change, step by step.
struct SiteSeries : HeldSeries {
    uint16_t device = 0;
    Memory memory = Memory::torch;
    uint32_t site_frame = 0;
    uint32_t via_frame = 0;            // the library function it splits its site by (sites.h SiteKey)
    uint32_t last_stack = 0;           // of its latest allocation: the stack shown when none survived
    bool no_python_frame = false;      // its frame is C++ or none: the autograd engine's thread (phases.h)
    uint64_t largest = 0;              // its largest allocation, and that one's stack: a buffer
    uint32_t largest_stack = 0;        // replaced by a bigger one every step is its latest
    // Survivors: blocks allocated in step k and still live at the end of k + window, each counted
    // there, at a full step's end (Replay::age_survivors()).
    HeldSeries aged;                       // their bytes, from k + window until freed
    std::map<uint32_t, uint64_t> bytes_by_stack;
    uint32_t last_survivor_stack = 0;
    uint64_t* last_stack_bytes = nullptr;  // bytes_by_stack's entry of last_survivor_stack (its node stays put)
    uint64_t surviving_allocations = 0;
    uint64_t first_survivor = UINT64_MAX;  // seq of the earliest-allocated survivor
    uint32_t survivor_steps = 0;           // steps k that left a survivor of some bytes
    uint32_t first_survivor_step = 0, last_survivor_step = UINT32_MAX;  // the first and latest of them
    std::vector<uint32_t> survivor_steps_in_head;  // those up to where judging may begin (StepSeries::keep_exact_until)
    UnitSeries units;                      // at the unit ends of the run in hand (within_step.h)
    std::optional<WithinStepRecord> within;  // its worst step, where it leaked inside one

    // A block still live `window` steps after its own; `head`: the latest step judging may begin at.
    void add_survivor(const LiveAlloc& a, uint32_t head);
    // Steps from s0 on (s0 at most `head`) that left a survivor of some bytes.
    size_t survivor_steps_from(size_t s0) const;
};

// What one holder (analysis/libraries.h) keeps outside torch's allocator on one device: the usage
// ledger's parts.
struct HolderSeries : HeldSeries {
    uint16_t device = 0;
    Memory memory = Memory::external;
    std::string library;
    uint32_t last_site = UINT32_MAX;  // of its latest allocation (index into Replay::sites)
};

// A library's own pool on one device as the library counts it (EventKind::pool_usage), at step
// ends: the last reading in each step (analysis/pools.h judges it).
struct PoolSeries {
    uint16_t device = 0;
    std::string library;  // as analysis/libraries.h spells it
    HeldSeries in_use;    // bytes its live arrays hold
    HeldSeries pool;      // bytes the pool took from the driver
};

class Replay {
public:
    // With `checks`, the events are validated as they are replayed, its live blocks the replay's
    // (one lookup for both): the replay stops at the first fault, and from there, or once the step
    // range has ended, `checks` goes on alone with a copy of the live blocks. `judged_from`: the
    // latest step judging may begin at; the sites' series are exact up to there (step_series.h).
    Replay(const Trace& context, uint32_t window, uint64_t last_step, uint32_t judged_from, EventValidator* checks = nullptr);
    // The next event: replayed, or once the replay has stopped, only checked. The context's tables
    // (stacks, streams, devices) hold what it refers to. Inline: once a run is under way, its
    // allocations and frees (nearly all its events) go straight to their own short path.
    void take(const Event& e) {
        constexpr uint32_t kBlock = 1u << int(EventKind::alloc) | 1u << int(EventKind::free_requested) |
                                    1u << int(EventKind::free_completed) | 1u << int(EventKind::free);
        if (steady_ && (kBlock >> int(e.kind) & 1)) [[likely]] return take_block(e);
        take_any(e);
    }
    // The step ends here (analysis/step_cuts.h says where).
    void end_step();
    // False once the step range asked for has ended: later events change nothing.
    bool wants_more() const { return last_step_ == UINT64_MAX || step_ <= last_step_; }
    // False once later events change nothing: past the step range, or past a fault.
    bool replaying() const { return !stopped_; }
    // Ends the unfinished step, if any; then the accessors below hold the whole trace.
    void finish();

    const Trace& context;
    std::vector<DeviceSummary> devices;
    std::vector<SiteSeries> sites;
    std::vector<HolderSeries> holders;          // outside torch's allocator, by device, memory and holder
    std::vector<PoolSeries> pools;              // libraries' own counts of their pools, by device and library
    static constexpr size_t kMaxPools = 256;    // the rest of a file's (a handful: one per library and device)
    std::vector<std::vector<NvmlReading>> nvml;  // every NVML reading, by device in `devices`' order
    std::vector<LiveAlloc> live_allocs() const;  // blocks never freed, in allocation order
    // A device's highest moment (peak.h), by index in `devices`; bytes -1 where nothing was allocated.
    const PeakMoment& peak(size_t device_index) const { return state_[device_index].top; }
    // A block as the peak's rule reads it: when it was allocated, against that moment.
    PeakMember peak_member(const LiveAlloc& a, const PeakMoment& moment) const {
        PeakMember m;
        m.size = a.size;
        m.site = a.site;
        m.stack = a.stack;
        if (!module_of_block_.empty()) [[unlikely]]
            if (const auto at = module_of_block_.find(a.seq); at != module_of_block_.end()) m.module = at->second;
        m.alloc_step = a.step;
        m.alloc_phase = a.allocated_in();
        m.in_peak_phase = a.seq >= moment.phase_start_seq;
        return m;
    }
    bool backward_marked() const { return phases_.backward_marked(); }
    bool backward_inferred() const { return phases_.backward_inferred(); }
    size_t full_steps() const { return step_; }
    uint64_t entries = 0;                        // as torch counts them (Trace::entry_count)
    uint64_t steps_before_trace = 0;             // cut before the first memory event
    bool has_memory_events = false;
    bool has_block_events = false;
    SiteResolver resolver;

private:
    struct DeviceState {
        int64_t allocated, reserved, pending, peak;
        std::vector<int64_t> by_stream;  // by stream index
        int64_t external = 0, pinned = 0;  // outside torch's allocator
        int64_t page_rounding = 0;         // the live `external` allocations' pages may show, at most
        PeakMoment top;                    // the highest `allocated` so far
        std::map<uint64_t, uint64_t> segments;  // address -> bytes: where its free blocks can be
    };
    size_t device_slot(uint8_t device) {
        return slot_of_device_[device] >= 0 ? size_t(slot_of_device_[device]) : add_device(device);
    }
    [[gnu::noinline]] size_t add_device(uint8_t device);
    // An out-of-memory event: the request, and the largest free block then among the segments.
    [[gnu::noinline, gnu::cold]] void out_of_memory(const Event& e);
    // Torch's allocations on the first device are the hot path: their sites by stack id.
    uint32_t site_of(uint8_t device, uint32_t stack) {
        if (device == stack_device_ && stack < site_of_stack_.size() && site_of_stack_[stack] != UINT32_MAX) [[likely]]
            return site_of_stack_[stack];
        return find_site(device, stack, Memory::torch);
    }
    [[gnu::noinline]] uint32_t find_site(uint8_t device, uint32_t stack, Memory memory);
    uint32_t holder_of(uint8_t device, Memory memory, uint32_t stack);
    // What an outside device allocation of this stack may show on NVML beyond its bytes
    // (analysis/driver_pages.h): its driver call is its stack's innermost frame.
    int64_t page_rounding(uint32_t stack, uint64_t size);
    uint32_t place(AddressMap& map, uint64_t key);
    [[gnu::noinline, gnu::cold]] uint32_t placed_again(AddressMap& map, uint64_t key, uint32_t slot, uint32_t old);
    // Rare beside torch's events: kept out of take_any()'s code.
    [[gnu::noinline]] void external_alloc(const Event& e);
    [[gnu::noinline]] void external_free(const Event& e);
    [[gnu::noinline]] void pool_reading(const Event& e);
    static constexpr uint32_t kNotLogged = UINT32_MAX;
    // `logged`: the series' number in the change log (log_number()), or kNotLogged to write it down now.
    void change(HeldSeries& s, int64_t bytes, uint32_t logged = kNotLogged);
    static uint32_t log_number(uint32_t site, bool aged) { return site << 1 | uint32_t(aged); }
    void log_change(uint32_t series, uint32_t step, double value);
    void write_logged_changes();
    void start();
    void cut();
    void hold_timeline_bytes(uint64_t n);
    void forget_steps_before_memory();
    [[gnu::noinline]] void take_any(const Event& e);
    void take_block(const Event& e);
    bool checked(const Event& e);
    [[gnu::noinline, gnu::cold]] void faulted(const Event& e, bool has_address);
    void process(const Event& e);
    void allocate(const Event& e);
    void request(const Event& e);
    void release(const Event& e);
    void stop();
    void released(LiveAlloc& a);
    void age_survivors();
    void note_unit(SiteSeries& s, uint32_t site);
    [[gnu::noinline]] void units_begin(SiteSeries& s, uint32_t site);
    [[gnu::noinline]] void new_peak(DeviceState& s, uint32_t stack);
    [[gnu::noinline]] void peak_member_freed(DeviceState& s, const LiveAlloc& a);
    void phase_began();
    void judge_units_of_step();
    void end_unit(const Event& e);
    void settle_units();

    const uint32_t window_;
    const uint64_t last_step_;
    const uint32_t judged_from_;
    // The blocks allocated in each of the last window + 1 steps, by step % (window + 1): (slot in
    // pool_, seq), those still live at the end of step + window are survivors.
    std::vector<std::vector<std::pair<uint32_t, uint64_t>>> allocated_in_step_;
    uint32_t allocated_now_ = 0;  // step_'s index in it
    // The sites' changes in the order they came, handed to their series a batch at a time, each
    // series' in one go: one site's state stays in cache for all its batch, not for one change.
    struct LoggedChange {
        uint32_t series;  // log_number()
        uint32_t step;
        double value;
    };
    static constexpr size_t kLoggedChanges = 1 << 20;
    std::vector<LoggedChange> changes_, sorted_changes_;
    std::vector<uint32_t> changes_of_series_;
    EventValidator* const checks_;
    bool stopped_ = false;  // and checks_, if any, keeps its own live blocks
    bool steady_ = false;   // started, block events seen, not stopped: take_block() may take them
    std::vector<DeviceState> state_;
    std::array<int16_t, 256> slot_of_device_;
    std::map<std::array<uint32_t, 3>, uint32_t> site_index_;  // {memory << 8 | device, site frame, via frame}
    std::unordered_map<uint64_t, uint32_t> holder_of_stack_;  // memory << 40 | device << 32 | stack -> holders
    std::unordered_map<uint32_t, bool> maps_own_pages_;      // by stack
    std::unordered_map<std::string, uint32_t> holder_index_;  // device, memory and library name -> holders
    std::vector<uint32_t> site_of_stack_;                // by stack id, for device stack_device_: the hot path
    uint8_t stack_device_ = 0;
    AddressMap live_;                                    // block_key() -> index into pool_
    AddressMap external_live_{64};                       // external_key() -> index into pool_
    std::vector<LiveAlloc> pool_;
    std::vector<uint32_t> free_slots_;
    uint64_t seq_ = 0;
    uint64_t timeline_bytes_ = 0;  // the devices' timelines, by hold_timeline_bytes()
    uint64_t cuts_before_memory_ = 0;
    uint32_t step_ = 0;
    bool events_since_cut_ = false, started_ = false;
    PhaseClock phases_;
    ModuleStack modules_;
    // The module annotation each live block was allocated under, by its seq: only blocks allocated
    // inside one, so a trace without module paths keeps none.
    std::unordered_map<uint64_t, uint32_t> module_of_block_;
    uint64_t phase_start_seq_ = 0;         // seq_ when the phase in hand began
    uint32_t unit_ = 0;                    // units ended in the run in hand (within_step.h)
    uint32_t unit_run_ = 0;                // runs of units begun: a step's end or another unit begins one
    uint32_t unit_marker_ = 0;             // the name of the run's unit marker
    uint32_t backwards_ = 0;               // backwards ended in the step in hand (the peak's microbatches)
    std::vector<uint32_t> touched_in_step_;  // sites changed in the run, for judge_units_of_step()
    // Sites that rose across the last run's units, until the next run's first unit end (or the
    // trace's end) says whether they were given back: (site, that run's record).
    std::vector<std::pair<uint32_t, WithinStepRecord>> rose_in_step_;
};

[[gnu::always_inline]] inline void Replay::log_change(uint32_t series, uint32_t step, double value) {
    changes_.push_back(LoggedChange{series, step, value});
    if (changes_.size() == kLoggedChanges) [[unlikely]] write_logged_changes();
}

// take()'s short path, inlined into the loops that call it: as a call, each event saved and
// restored six registers (real trace: 3 % of `analyze`).

// A new live block at `key` of `map`: its slot in pool_, or kMissing when the address is live
// already and the replay checks (a fault: the first block stays, the one its free will name).
[[gnu::always_inline]] inline uint32_t Replay::place(AddressMap& map, uint64_t key) {
    if (free_slots_.empty()) [[unlikely]] {  // a slot more, free until taken
        free_slots_.push_back(uint32_t(pool_.size()));
        pool_.emplace_back();
    }
    const uint32_t slot = free_slots_.back();
    const uint32_t old = map.put(key, slot);
    if (old != AddressMap::kMissing) [[unlikely]] return placed_again(map, key, slot, old);
    free_slots_.pop_back();
    return slot;
}

// What a site holds at step ends changes only when it allocates or frees: the value it had
// since its last change is written down once, when it changes again in a later step.
[[gnu::always_inline]] inline void Replay::change(HeldSeries& s, int64_t bytes, uint32_t logged) {
    if (s.due(step_)) {
        if (logged == kNotLogged) s.held.write(s.touched, s.written);
        else log_change(logged, s.touched, s.written);
    }
    s.live += bytes;
    s.touched = step_;
    s.ever_touched = true;
}

// A site's unit ends, written down as its step ends are (within_step.h).
[[gnu::always_inline]] inline void Replay::note_unit(SiteSeries& s, uint32_t site) {
    if (s.units.run != unit_run_) [[unlikely]] return units_begin(s, site);
    if (s.units.touched != unit_) [[unlikely]] {
        s.units.held.emplace_back(s.units.touched, s.live);
        s.units.touched = unit_;
    }
}

[[gnu::always_inline]] inline void Replay::released(LiveAlloc& a) {
    if (!module_of_block_.empty()) [[unlikely]] module_of_block_.erase(a.seq);
    SiteSeries& s = sites[a.site];
    note_unit(s, a.site);
    change(s, -int64_t(a.size), log_number(a.site, false));
    if (a.aged) change(s.aged, -int64_t(a.size), log_number(a.site, true));
    a.freed = true;
}

// The validator's checks of the event itself; false at a fault (the event is never replayed).
[[gnu::always_inline]] inline bool Replay::checked(const Event& e) {
    const bool has_address = checks_->check_fields(context, e);
    if (!checks_->faulted()) [[likely]] return true;
    faulted(e, has_address);
    return false;
}

[[gnu::always_inline]] inline void Replay::allocate(const Event& e) {
    const uint32_t slot = place(live_, block_key(e.device, e.addr));
    if (slot == AddressMap::kMissing) {
        checks_->allocated_again();
        stop();
        return;
    }
    DeviceState& s = state_[device_slot(e.device)];
    const uint32_t site = site_of(e.device, e.stack);
    if (phases_.allocated(sites[site].no_python_frame)) [[unlikely]] phase_began();
    pool_[slot] = LiveAlloc{e.addr, e.size, seq_++, e.stack, site, step_, e.stream, e.device, false, uint8_t(phases_.now())};
    allocated_in_step_[allocated_now_].emplace_back(slot, seq_ - 1);
    if (const uint32_t module = modules_.now()) [[unlikely]] module_of_block_[seq_ - 1] = module;
    note_unit(sites[site], site);
    change(sites[site], int64_t(e.size), log_number(site, false));
    sites[site].last_stack = e.stack;
    if (e.size >= sites[site].largest) [[unlikely]] sites[site].largest = e.size, sites[site].largest_stack = e.stack;
    s.allocated += int64_t(e.size);
    if (e.stream >= s.by_stream.size()) s.by_stream.resize(context.streams.size(), 0);
    s.by_stream[e.stream] += int64_t(e.size);
    s.peak = std::max(s.peak, s.allocated);
    if (s.allocated > s.top.bytes) [[unlikely]] new_peak(s, e.stack);
    if (checks_) {
        checks_->allocated(e);
        if (checks_->faulted()) stop();  // after this event
    }
}

// The block waits for other streams before it is back with the allocator.
[[gnu::always_inline]] inline void Replay::request(const Event& e) {
    const uint32_t a = live_.get(block_key(e.device, e.addr));
    if (a != AddressMap::kMissing && !pool_[a].requested) {
        pool_[a].requested = true;
        state_[device_slot(e.device)].pending += int64_t(pool_[a].size);
    }
}

[[gnu::always_inline]] inline void Replay::release(const Event& e) {
    DeviceState& s = state_[device_slot(e.device)];
    const uint32_t a = live_.take(block_key(e.device, e.addr));
    if (a != AddressMap::kMissing) {
        LiveAlloc& block = pool_[a];
        if (checks_) checks_->released(e.device, block.size);
        if (block.seq < s.top.seq_end) [[unlikely]] peak_member_freed(s, block);
        if (block.requested) s.pending -= int64_t(block.size);
        s.by_stream[block.stream] -= int64_t(block.size);
        released(block);
        free_slots_.push_back(a);
    }
    s.allocated -= int64_t(e.size);
}

// A block event once the run is under way (steady_): what process() would do, less
// its tests for the first events.
[[gnu::always_inline]] inline void Replay::take_block(const Event& e) {
    if (checks_ && !checked(e)) return;
    entries += 1 + (e.kind == EventKind::free);
    events_since_cut_ = true;
    if (e.kind == EventKind::alloc) allocate(e);
    else if (e.kind == EventKind::free_requested) request(e);
    else release(e);
}

}  // namespace vramscope
