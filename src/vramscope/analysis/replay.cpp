#include "analysis/replay.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "analysis/driver_pages.h"
#include "analysis/libraries.h"

namespace vramscope {

Replay::Replay(const Trace& t, uint32_t window, uint64_t last_step, uint32_t judged_from, EventValidator* checks)
    : context(t), resolver(t.stacks), window_(window), last_step_(last_step), judged_from_(judged_from),
      allocated_in_step_(size_t(window) + 1), checks_(checks), live_(4096), phases_(t.stacks), modules_(t.stacks) {
    slot_of_device_.fill(-1);
}

size_t Replay::add_device(uint8_t device) {
    size_t i = 0;
    while (i < devices.size() && devices[i].device != device) ++i;
    if (i == devices.size()) {
        devices.push_back(DeviceSummary{device});
        state_.push_back({0, 0, 0, 0, {}, 0, 0, 0, {}});
        nvml.emplace_back();
        for (const DeviceInfo& d : context.devices)
            if (d.device == device) {
                devices[i].total_memory = d.total_memory;
                if (d.total_memory) devices[i].capacity_source = "trace";
                const auto a = int64_t(d.baseline_allocated);
                state_[i] = {a, int64_t(d.baseline_reserved), 0, a, {}, 0, 0, 0, {}};
            }
        // A device first seen mid-run held what it held before at the step ends already cut:
        // every timeline has one point per step, so step k is timeline[k] on every device.
        const DeviceState& s = state_[i];
        hold_timeline_bytes(uint64_t(step_) * sizeof(StepPoint));
        devices[i].timeline.assign(step_, StepPoint{uint64_t(s.allocated), uint64_t(s.reserved), uint64_t(s.peak), 0, {}});
    }
    slot_of_device_[device] = int16_t(i);
    return i;
}

// A site not in site_of_stack_ yet (or not torch's, or on another device).
uint32_t Replay::find_site(uint8_t device, uint32_t stack, Memory memory) {
    const bool cached = device == stack_device_ && memory == Memory::torch;
    const SiteKey key = resolver.key(stack);
    const uint32_t frame = key.site;
    auto [it, added] = site_index_.try_emplace({uint32_t(memory) << 8 | device, frame, key.via}, uint32_t(sites.size()));
    if (added) {
        sites.emplace_back();
        sites.back().device = device;
        sites.back().memory = memory;
        sites.back().site_frame = frame;
        sites.back().via_frame = key.via;
        sites.back().no_python_frame = !frame || is_cpp_file(context.stacks.string(context.stacks.frame(frame).file));
        sites.back().held.keep_exact_until(judged_from_);
        sites.back().aged.held.keep_exact_until(judged_from_);
    }
    if (cached) {
        if (stack >= site_of_stack_.size()) site_of_stack_.resize(std::max<size_t>(stack + 1, site_of_stack_.size() * 2), UINT32_MAX);
        site_of_stack_[stack] = it->second;
    }
    return it->second;
}

// The holder of a block outside torch's allocator: the library its stack's innermost frame names.
uint32_t Replay::holder_of(uint8_t device, Memory memory, uint32_t stack) {
    auto [it, added] = holder_of_stack_.try_emplace(uint64_t(memory) << 40 | uint64_t(device) << 32 | stack, 0);
    if (!added) return it->second;
    const std::string library =
        library_name(stack ? context.stacks.string(context.stacks.frame(context.stacks.node(stack).frame).file) : kUnknownLibrary);
    auto [holder, new_holder] =
        holder_index_.try_emplace(std::string{char(device), char(memory)} + library, uint32_t(holders.size()));
    if (new_holder) {
        holders.emplace_back();
        holders.back().device = device;
        holders.back().memory = memory;
        holders.back().library = library;
        holders.back().held.keep_exact_until(UINT32_MAX);  // a holder per library and device: never folded
    }
    return it->second = holder->second;
}

int64_t Replay::page_rounding(uint32_t stack, uint64_t size) {
    if (!stack) return 0;
    auto [it, added] = maps_own_pages_.try_emplace(stack, false);
    if (added) it->second = maps_own_pages(context.stacks.string(context.stacks.frame(context.stacks.node(stack).frame).function));
    return it->second ? int64_t(page_rounding_bound(size)) : 0;
}

uint32_t Replay::placed_again(AddressMap& map, uint64_t key, uint32_t slot, uint32_t old) {
    if (checks_) {
        map.put(key, old);
        return AddressMap::kMissing;
    }
    // Unchecked: the older block is forgotten, as a map would.
    free_slots_.back() = old;
    pool_[old].freed = true;
    return slot;
}

void Replay::end_step() {
    start();
    age_survivors();
    cut();
    allocated_now_ = allocated_now_ == window_ ? 0 : allocated_now_ + 1;
    if (!wants_more()) stop();
}

// The blocks of step step_ − window still live at this full step's end are survivors: from this
// step end on, their bytes are in their sites' `aged` series until they are freed.
void Replay::age_survivors() {
    const uint32_t next = allocated_now_ == window_ ? 0 : allocated_now_ + 1;  // step_ − window's
    std::vector<std::pair<uint32_t, uint64_t>>& blocks = allocated_in_step_[next];
    for (const auto& [slot, seq] : blocks) {
        LiveAlloc& a = pool_[slot];
        if (a.freed || a.seq != seq) continue;
        a.aged = true;
        SiteSeries& s = sites[a.site];
        change(s.aged, int64_t(a.size), log_number(a.site, true));
        s.add_survivor(a, judged_from_);
    }
    blocks.clear();
}

void Replay::cut() {
    if (!has_memory_events) ++cuts_before_memory_;
    judge_units_of_step();
    for (size_t i = 0; i < devices.size(); ++i) {
        DeviceState& s = state_[i];
        StepPoint p{uint64_t(std::max<int64_t>(0, s.allocated)), uint64_t(std::max<int64_t>(0, s.reserved)),
                    uint64_t(std::max<int64_t>(0, s.peak)), uint64_t(std::max<int64_t>(0, s.pending)), {}};
        p.external = uint64_t(std::max<int64_t>(0, s.external));
        p.pinned = uint64_t(std::max<int64_t>(0, s.pinned));
        // A reading taken before memory the trace records changed in the step (the one taken as the
        // device is first watched, before the step's allocations) is not the step end's: set
        // against the step end's holdings, it would count them as the context's or as growth.
        if (NvmlReading* r = nvml[i].empty() ? nullptr : &nvml[i].back();
            r && r->step == step_ && r->reserved == s.reserved && r->external == s.external) {
            p.nvml_used = r->used;
            r->stands = true;
        }
        for (size_t k = 0; k < s.by_stream.size(); ++k)
            if (s.by_stream[k] > 0) p.by_stream.emplace_back(context.streams[k], uint64_t(s.by_stream[k]));
        hold_timeline_bytes(sizeof(StepPoint) + p.by_stream.size() * sizeof(p.by_stream[0]));
        devices[i].timeline.push_back(std::move(p));
        s.peak = s.allocated;
    }
    ++step_;
    backwards_ = 0;
    events_since_cut_ = false;
    if (phases_.step_ended()) phase_began();
}

void Replay::units_begin(SiteSeries& s, uint32_t site) {
    s.units.run = unit_run_;
    s.units.at_start = s.live;
    s.units.held.clear();
    if (unit_ > 0) s.units.held.emplace_back(0, s.live);
    s.units.touched = unit_;
    touched_in_step_.push_back(site);
}

void Replay::judge_units_of_step() {
    settle_units();
    if (unit_ >= kMinSteps)
        for (uint32_t site : touched_in_step_) {
            const SiteSeries& s = sites[site];
            if (auto rose = judge_units(s.units, s.live, unit_, step_, s.last_stack, unit_marker_))
                rose_in_step_.emplace_back(site, *rose);
        }
    touched_in_step_.clear();
    unit_ = 0;
    ++unit_run_;
}

// A unit ended: one more of the run in hand, or the first of a run of another unit (an evaluation
// after a step's microbatches), which ends the run before it as a step's end does.
void Replay::end_unit(const Event& e) {
    if (unit_ > 0 && e.name != unit_marker_) judge_units_of_step();
    unit_marker_ = e.name;
    if (++unit_ == 1) settle_units();
    if (unit_of_marker(context.stacks.string(e.name)) == kMicrobatchUnit) ++backwards_;
}

void Replay::settle_units() {
    for (const auto& [site, rose] : rose_in_step_)
        if (sites[site].live <= rose.first_unit) keep_worst(sites[site].within, rose);
    rose_in_step_.clear();
}

void Replay::phase_began() { phase_start_seq_ = seq_; }

void Replay::new_peak(DeviceState& s, uint32_t stack) {
    PeakMoment& p = s.top;
    p.bytes = s.allocated;
    p.stack = stack;
    p.module = modules_.now();
    p.seq_end = seq_;
    p.phase_start_seq = phase_start_seq_;
    p.phase_count = phases_.count();
    p.step = step_;
    p.microbatch = backwards_;
    p.phase = phases_.now();
    p.reserved = s.reserved;
    p.external = s.external;
    p.pinned = s.pinned;
    p.freed.clear();
}

void Replay::peak_member_freed(DeviceState& s, const LiveAlloc& a) {
    PeakMember& m = s.top.freed.emplace_back(peak_member(a, s.top));
    m.freed = true;
    m.freed_in_peak_phase = phases_.count() == s.top.phase_count;
    m.free_phase = phases_.now();
    m.free_step = step_;
}


// A point per device per step, each with its streams: 256 devices and a step marker every two
// bytes would take gigabytes from a small file. They are held to what reading it could hold, with
// the events it holds beside them (a snapshot's).
void Replay::hold_timeline_bytes(uint64_t n) {
    if ((timeline_bytes_ += kGrowthCharge * n) + kGrowthCharge * context.events.size() * sizeof(Event) > context.limits.max_held_bytes)
        throw std::runtime_error(context.source + ": " + std::to_string(devices.size()) + " devices over " + std::to_string(step_) +
                                 " steps: their timelines would hold more than " +
                                 std::to_string(context.limits.max_held_bytes >> 20) +
                                 " MiB (the limit; --max-memory raises it)");
}

// Steps that ended before the first memory event were never seen (a ring buffer that wrapped
// keeps annotations of the whole run, entries of its end only): judging them would average the
// growth over steps the trace does not hold. A trace without memory events keeps them.
void Replay::forget_steps_before_memory() {
    steps_before_trace = cuts_before_memory_;
    step_ -= uint32_t(cuts_before_memory_);
    for (DeviceSummary& d : devices) {
        d.timeline.erase(d.timeline.begin(), d.timeline.begin() + ptrdiff_t(cuts_before_memory_));
        if (d.oom_step) d.oom_step = 0;
        if (d.oom) d.oom->step = 0;
    }
    for (std::vector<NvmlReading>& readings : nvml) {
        std::erase_if(readings, [&](const NvmlReading& r) { return r.step < cuts_before_memory_; });
        for (NvmlReading& r : readings) r.step -= cuts_before_memory_;
    }
}

void SiteSeries::add_survivor(const LiveAlloc& a, uint32_t head) {
    if (a.size && a.step != last_survivor_step) {
        if (!survivor_steps) first_survivor_step = a.step;
        last_survivor_step = a.step;
        ++survivor_steps;
        if (a.step <= head) survivor_steps_in_head.push_back(a.step);
    }
    if (!last_stack_bytes || a.stack != last_survivor_stack) {
        last_survivor_stack = a.stack;
        last_stack_bytes = &bytes_by_stack[a.stack];
    }
    *last_stack_bytes += a.size;
    ++surviving_allocations;
    first_survivor = std::min(first_survivor, a.seq);
}

size_t SiteSeries::survivor_steps_from(size_t s0) const {
    const auto before = std::lower_bound(survivor_steps_in_head.begin(), survivor_steps_in_head.end(), s0);
    return survivor_steps - size_t(before - survivor_steps_in_head.begin());
}

// The devices the trace declared come first, with their baselines.
void Replay::start() {
    if (started_) return;
    started_ = true;
    for (const DeviceInfo& d : context.devices) device_slot(uint8_t(d.device));
}

void Replay::faulted(const Event& e, bool has_address) {
    stop();
    if (has_address) checks_->check_addresses(e);
}

// Later events change nothing. The validator sees them alone, from a copy of the live blocks: the
// replay's stay as they were, for the findings.
void Replay::stop() {
    stopped_ = true;
    steady_ = false;
    if (checks_)
        for (const LiveAlloc& a : live_allocs()) {
            const Memory memory = sites[a.site].memory;
            if (memory == Memory::torch) checks_->adopt(block_key(a.device, a.addr), a.size);
            else checks_->adopt_external(external_key(memory == Memory::pinned, a.addr), a.size);
        }
}

void Replay::take_any(const Event& e) {
    if (stopped_) {
        if (checks_) checks_->see(context, e);
        return;
    }
    if (checks_ && !checked(e)) return;
    start();
    process(e);
    events_since_cut_ = true;
    steady_ = !stopped_ && has_block_events;
}

void Replay::process(const Event& e) {
    entries += 1 + (e.kind == EventKind::free);
    if (!has_memory_events && is_memory_event(e.kind)) {
        has_memory_events = true;
        if (cuts_before_memory_) forget_steps_before_memory();
    }
    has_block_events |= is_block_event(e.kind);
    switch (e.kind) {
    case EventKind::alloc: allocate(e); break;
    case EventKind::free_requested: request(e); break;
    case EventKind::free_completed:
    case EventKind::free: release(e); break;
    case EventKind::segment_alloc:
    case EventKind::segment_map: {
        DeviceState& d = state_[device_slot(e.device)];
        d.reserved += int64_t(e.size);
        d.segments[e.addr] = e.size;
        break;
    }
    case EventKind::segment_free:
    case EventKind::segment_unmap: {
        DeviceState& d = state_[device_slot(e.device)];
        d.reserved -= int64_t(e.size);
        d.segments.erase(e.addr);
        break;
    }
    case EventKind::oom: out_of_memory(e); break;
    case EventKind::external_alloc:
    case EventKind::pinned_alloc: external_alloc(e); break;
    case EventKind::external_free:
    case EventKind::pinned_free: external_free(e); break;
    case EventKind::microbatch:
        end_unit(e);
        if (phases_.see(e)) phase_began();
        break;
    case EventKind::annotation_start:
    case EventKind::annotation_end:
        if (phases_.see(e)) phase_began();
        modules_.see(e);
        break;
    case EventKind::device_usage: {
        const size_t i = device_slot(e.device);
        hold_timeline_bytes(sizeof(NvmlReading));
        nvml[i].push_back(NvmlReading{step_, e.size, state_[i].reserved, state_[i].external, state_[i].page_rounding});
        break;
    }
    case EventKind::pool_usage: pool_reading(e); break;
    default: break;
    }
}

// Memory outside torch's allocator: its own sites, holders and device totals, never `allocated`.
void Replay::external_alloc(const Event& e) {
    const Memory memory = memory_of(e.kind);
    const uint32_t slot = place(external_live_, external_key(is_pinned_event(e.kind), e.addr));
    if (slot == AddressMap::kMissing) {
        checks_->external_allocated_again();
        stop();
        return;
    }
    DeviceState& s = state_[device_slot(e.device)];
    const uint32_t site = find_site(e.device, e.stack, memory);
    pool_[slot] = LiveAlloc{e.addr, e.size, seq_++, e.stack, site, step_, e.stream, e.device, false, uint8_t(phases_.now())};
    allocated_in_step_[allocated_now_].emplace_back(slot, seq_ - 1);
    note_unit(sites[site], site);
    change(sites[site], int64_t(e.size), log_number(site, false));
    sites[site].last_stack = e.stack;
    HolderSeries& holder = holders[holder_of(e.device, memory, e.stack)];
    change(holder, int64_t(e.size));
    holder.last_site = site;
    if (memory == Memory::pinned) s.pinned += int64_t(e.size);
    else s.external += int64_t(e.size), s.page_rounding += page_rounding(e.stack, e.size);
}

// Given back, as the block was allocated: its device, its size (a capture records only the frees
// of what it saw allocated, so one of an unknown address is a fault).
void Replay::external_free(const Event& e) {
    const uint32_t a = external_live_.take(external_key(is_pinned_event(e.kind), e.addr));
    if (a == AddressMap::kMissing) {
        if (checks_) checks_->external_freed_unknown(), stop();
        return;
    }
    LiveAlloc& block = pool_[a];
    const Memory memory = sites[block.site].memory;
    DeviceState& s = state_[device_slot(block.device)];
    if (memory == Memory::pinned) s.pinned -= int64_t(block.size);
    else s.external -= int64_t(block.size), s.page_rounding -= page_rounding(block.stack, block.size);
    change(holders[holder_of(block.device, memory, block.stack)], -int64_t(block.size));
    released(block);
    free_slots_.push_back(a);
    if (checks_ && block.size != e.size) checks_->external_freed_other_size(), stop();  // after this event
}

// A library's count of its pool at this step's end. Readings before the first memory event are of
// steps the replay forgets (forget_steps_before_memory), as the live monitor does.
void Replay::pool_reading(const Event& e) {
    if (!has_memory_events) return;
    device_slot(e.device);
    const std::string_view library = context.stacks.string(e.name);
    auto it = std::find_if(pools.begin(), pools.end(), [&](const PoolSeries& p) { return p.device == e.device && p.library == library; });
    if (it == pools.end()) {
        if (pools.size() >= kMaxPools) return;  // a library per name: only a hostile file has more
        it = pools.emplace(pools.end());
        it->device = e.device;
        it->library = std::string(library);
        it->in_use.held.keep_exact_until(UINT32_MAX);  // a pool per library and device: never folded
        it->pool.held.keep_exact_until(UINT32_MAX);
    }
    change(it->in_use, int64_t(e.size) - it->in_use.live);
    change(it->pool, int64_t(e.addr) - it->pool.live);
}

// The log's changes by series (a counting sort keeps each series' in order), then each series'.
void Replay::write_logged_changes() {
    changes_of_series_.assign(sites.size() * 2 + 1, 0);
    for (const LoggedChange& c : changes_) ++changes_of_series_[c.series + 1];
    for (size_t i = 1; i < changes_of_series_.size(); ++i) changes_of_series_[i] += changes_of_series_[i - 1];
    sorted_changes_.resize(changes_.size());
    for (const LoggedChange& c : changes_) sorted_changes_[changes_of_series_[c.series]++] = c;
    for (const LoggedChange& c : sorted_changes_) {
        SiteSeries& s = sites[c.series >> 1];
        (c.series & 1 ? s.aged.held : s.held).write(c.step, c.value);
    }
    changes_.clear();
}

void Replay::finish() {
    write_logged_changes();
    start();
    if (events_since_cut_) {
        // The unfinished step: shown in the timeline, never judged.
        const uint32_t full = step_;
        cut();
        step_ = full;
    }
    settle_units();
}

void Replay::out_of_memory(const Event& e) {
    const size_t i = device_slot(e.device);
    DeviceSummary& d = devices[i];
    const DeviceState& s = state_[i];
    if (!d.oom_step) d.oom_step = step_;
    // Free memory the driver reported then, plus what torch held: the device's capacity, less
    // other processes' share.
    if (!d.total_memory) {
        d.total_memory = e.addr + uint64_t(std::max<int64_t>(0, s.reserved));
        d.capacity_source = "oom-event";
    }
    if (d.oom) return;
    // The gaps between the device's live blocks inside each segment (a block freed but awaiting
    // another stream still holds its place). Rare: the live blocks are gathered here, not kept sorted.
    std::vector<std::pair<uint64_t, uint64_t>> blocks;
    std::vector<bool> freed(pool_.size(), false);
    for (uint32_t f : free_slots_) freed[f] = true;
    for (size_t k = 0; k < pool_.size(); ++k)
        if (!freed[k] && pool_[k].device == e.device && sites[pool_[k].site].memory == Memory::torch)
            blocks.emplace_back(pool_[k].addr, pool_[k].size);
    std::sort(blocks.begin(), blocks.end());
    uint64_t largest = 0;
    auto b = blocks.begin();
    for (const auto& [start, size] : s.segments) {
        uint64_t at = start;
        for (b = std::lower_bound(blocks.begin(), blocks.end(), std::pair<uint64_t, uint64_t>{start, 0});
             b != blocks.end() && b->first < start + size; ++b) {
            if (b->first > at) largest = std::max(largest, b->first - at);
            at = std::max(at, b->first + b->second);
        }
        if (start + size > at) largest = std::max(largest, start + size - at);
    }
    d.oom = OomRequest{step_, e.size, e.addr, uint64_t(std::max<int64_t>(0, s.reserved - s.allocated)), largest};
}

std::vector<LiveAlloc> Replay::live_allocs() const {
    std::vector<LiveAlloc> out;
    std::vector<bool> freed(pool_.size(), false);
    for (uint32_t f : free_slots_) freed[f] = true;
    for (size_t i = 0; i < pool_.size(); ++i)
        if (!freed[i]) out.push_back(pool_[i]);
    std::sort(out.begin(), out.end(), [](const LiveAlloc& a, const LiveAlloc& b) { return a.seq < b.seq; });
    return out;
}

}  // namespace vramscope
