#include "analysis/live_monitor.h"

#include <algorithm>
#include <tuple>

#include "events/validate.h"

namespace vramscope {

LiveMonitor::LiveMonitor(const JudgeSettings& settings)
    : young_((settings.check(), settings.window)), window_(settings.window),
      warmup_(settings.warmup >= 0 ? size_t(settings.warmup) : kWarmupSteps), min_steps_(settings.min_steps) {}

void LiveMonitor::alloc(uint8_t device, uint64_t addr, uint64_t size, uint32_t site, Memory memory, uint16_t library) {
    release(device, addr, memory);  // a block never freed before its address came back: its free was missed
    if (memory != Memory::external) library = 0;
    const Block block{addr, size, serial_++, step_, site, library, device, memory};
    uint32_t slot;
    if (free_slots_.empty()) {
        slot = uint32_t(blocks_.size());
        blocks_.push_back(block);
    } else {
        slot = free_slots_.back();
        free_slots_.pop_back();
        blocks_[slot] = block;
    }
    const uint64_t k = site_key(device, memory, site);
    if (memory == Memory::torch) note_unit(k, held_[k]);
    held_[k] += int64_t(size);
    young_[step_ % window_][k] += int64_t(size);
    Device& d = devices_[device];
    if (memory == Memory::torch) {
        live_.put(key(device, addr), slot);
        d.allocated += int64_t(size);
        d.peak = std::max(d.peak, d.allocated);
    } else {
        external_live_.put(external_key(memory == Memory::pinned, addr), slot);
        if (memory == Memory::external) d.external += int64_t(size);
        if (library) {
            library_bytes_[pool_key(device, library)] += int64_t(size);
            latest_site_[pool_key(device, library)] = site;
            site_library_[k] = library;
        }
    }
}

void LiveMonitor::pool(uint8_t device, uint16_t library, uint64_t in_use, uint64_t pool_bytes) {
    Pool& p = pools_[pool_key(device, library)];
    p.in_use_now = in_use;
    p.pool_now = pool_bytes;
}

void LiveMonitor::release(uint8_t device, uint64_t addr, Memory memory) {
    const uint32_t slot = memory == Memory::torch ? live_.take(key(device, addr))
                                                  : external_live_.take(external_key(memory == Memory::pinned, addr));
    if (slot == AddressMap::kMissing) return;  // allocated before capture began
    const Block& b = blocks_[slot];
    const uint64_t k = site_key(b.device, b.memory, b.site);
    if (b.memory == Memory::torch) note_unit(k, held_[k]);
    held_[k] -= int64_t(b.size);
    if (b.step + window_ > step_) young_[b.step % window_][k] -= int64_t(b.size);
    if (b.memory == Memory::torch) devices_[b.device].allocated -= int64_t(b.size);
    else if (b.memory == Memory::external) devices_[b.device].external -= int64_t(b.size);
    if (b.library) library_bytes_[pool_key(b.device, b.library)] -= int64_t(b.size);
    free_slots_.push_back(slot);
}

void LiveMonitor::set_capacity(uint8_t device, uint64_t capacity, uint64_t allocated_before) {
    Device& d = devices_[device];
    d.capacity = capacity;
    d.allocated += int64_t(allocated_before);
    d.peak = std::max(d.peak, d.allocated);
}

std::optional<uint64_t> LiveMonitor::projected_oom_step() const {
    std::optional<uint64_t> first;
    for (const Device& d : devices_) {
        const auto at = vramscope::projected_oom_step(step_, d.capacity, uint64_t(std::max<int64_t>(0, d.last_peak + d.external)), d.leak_rate);
        if (at && (!first || *at < *first)) first = at;
    }
    return first;
}

SiteJudgement LiveMonitor::judge_recent(const Series& s) const {
    const size_t n = std::min(s.count, kRecentSteps);
    std::array<double, kRecentSteps> aged, held;
    for (size_t i = 0; i < n; ++i) {
        aged[i] = s.aged[(s.count - n + i) % kRecentSteps];
        held[i] = s.held[(s.count - n + i) % kRecentSteps];
    }
    return judge_site(std::span<const double>(aged.data(), n), std::span<const double>(held.data(), n), min_steps_);
}

std::vector<std::pair<uint64_t, uint64_t>> LiveMonitor::newest_blocks(const LiveLeak& leak) const {
    std::vector<std::tuple<uint64_t, uint64_t, size_t>> mine;  // (size or 0, serial, slot)
    std::vector<bool> free(blocks_.size());
    for (uint32_t slot : free_slots_) free[slot] = true;
    const bool replaced = leak.evidence == LeakEvidence::replaced_bigger;
    if (leak.evidence == LeakEvidence::pool_in_use) {
        // A pool's blocks, oldest first: the arrays lowest in the oldest were kept the longest, and
        // what keeps them is the owner (the step's newest are still in the loop's locals).
        for (size_t slot = 0; slot < blocks_.size(); ++slot) {
            const auto& b = blocks_[slot];
            if (!free[slot] && b.library == leak.pool_library && b.device == leak.device && b.memory == Memory::external)
                mine.emplace_back(0, b.serial, slot);
        }
        const size_t n = std::min(mine.size(), kBlocksKept);
        std::partial_sort(mine.begin(), mine.begin() + ptrdiff_t(n), mine.end());
        std::vector<std::pair<uint64_t, uint64_t>> out;
        for (size_t i = 0; i < n; ++i) out.emplace_back(blocks_[std::get<2>(mine[i])].addr, blocks_[std::get<2>(mine[i])].size);
        return out;
    }
    // Survivors: blocks that outlived a step end, as the judge counts them (the step in hand still
    // holds its newest blocks in loop locals, which would hide the container that keeps the old
    // ones), else any. A replaced buffer: the largest first, whatever their age.
    for (const bool old_only : {!replaced, false}) {
        for (size_t slot = 0; slot < blocks_.size(); ++slot) {
            const auto& b = blocks_[slot];
            if (!free[slot] && b.site == leak.site && b.device == leak.device && b.memory == leak.memory &&
                (!old_only || b.step + window_ < step_))
                mine.emplace_back(replaced ? b.size : 0, b.serial, slot);
        }
        if (!mine.empty()) break;
    }
    const size_t n = std::min(mine.size(), kBlocksKept);
    std::partial_sort(mine.begin(), mine.begin() + n, mine.end(), [](auto& a, auto& b) { return a > b; });
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (size_t i = 0; i < n; ++i) out.emplace_back(blocks_[std::get<2>(mine[i])].addr, blocks_[std::get<2>(mine[i])].size);
    return out;
}

void LiveMonitor::note_unit(uint64_t k, int64_t live) {
    UnitSeries& u = units_[k];
    if (u.run != unit_run_) {
        u.run = unit_run_;
        u.at_start = live;
        u.held.clear();
        if (unit_ > 0) u.held.emplace_back(0, live);
        u.touched = unit_;
        touched_in_step_.push_back(k);
    } else if (u.touched != unit_) {
        u.held.emplace_back(u.touched, live);
        u.touched = unit_;
    }
}

void LiveMonitor::end_unit(uint32_t marker) {
    if (unit_ > 0 && marker != unit_marker_) {
        touched_in_step_.clear();
        unit_ = 0;
        ++unit_run_;
    }
    unit_marker_ = marker;
    ++unit_;
}

std::vector<LiveLeak> LiveMonitor::rising_in_step() const {
    std::vector<LiveLeak> out;
    for (uint64_t k : touched_in_step_) {
        const auto held = held_.find(k);
        const auto rose = judge_units(units_.at(k), held == held_.end() ? 0 : held->second, unit_, uint32_t(step_), 0);
        if (!rose) continue;
        const Device& d = devices_[uint8_t(k >> 56)];
        LiveLeak leak{uint8_t(k >> 56), uint32_t(k), Memory::torch, Shape::rising, LeakEvidence::survivors,
                      rose->bytes_per_unit, step_,
                      vramscope::projected_oom_step(unit_, d.capacity, uint64_t(std::max<int64_t>(0, d.peak + d.external)),
                                                    rose->bytes_per_unit),
                      {}};
        // This step's blocks, oldest first: the first units' parts are what only the container that
        // keeps them holds (the unit in hand is still in the loop's locals).
        std::vector<std::pair<uint64_t, size_t>> mine;  // (serial, slot)
        std::vector<bool> free(blocks_.size());
        for (uint32_t slot : free_slots_) free[slot] = true;
        for (size_t slot = 0; slot < blocks_.size(); ++slot) {
            const Block& b = blocks_[slot];
            if (!free[slot] && b.site == leak.site && b.device == leak.device && b.memory == Memory::torch && b.step == step_)
                mine.emplace_back(b.serial, slot);
        }
        const size_t n = std::min(mine.size(), kBlocksKept);
        std::partial_sort(mine.begin(), mine.begin() + ptrdiff_t(n), mine.end());
        for (size_t i = 0; i < n; ++i) leak.newest_blocks.emplace_back(blocks_[mine[i].second].addr, blocks_[mine[i].second].size);
        out.push_back(std::move(leak));
    }
    return out;
}

bool LiveMonitor::counted(uint8_t device, Memory memory, uint32_t site) const {
    if (memory != Memory::external || pools_.empty()) return false;
    const auto library = site_library_.find(site_key(device, memory, site));
    if (library == site_library_.end()) return false;
    const auto p = pools_.find(pool_key(device, library->second));
    return p != pools_.end() && p->second.counts;
}

// Each pool's count at this step end, judged over the recent step ends as a site's are.
void LiveMonitor::judge_pools(std::vector<LiveLeak>& found) {
    for (auto& [k, p] : pools_) {
        const auto device = uint8_t(k >> 16);
        const auto library = uint16_t(k);
        if (p.count == 0) p.count = std::min<size_t>(step_ - warmup_ - 1, kRecentSteps);  // zeros since warm-up, as offline
        const auto bytes = library_bytes_.find(k);
        const size_t at = p.count % kRecentSteps;
        p.in_use[at] = double(p.in_use_now);
        p.pool[at] = double(p.pool_now);
        p.driver[at] = bytes == library_bytes_.end() ? 0 : double(std::max<int64_t>(0, bytes->second));
        ++p.count;
        const size_t n = std::min(p.count, kRecentSteps);
        std::array<double, kRecentSteps> in_use;
        for (size_t i = 0; i < n; ++i) in_use[i] = p.in_use[(p.count - n + i) % kRecentSteps];
        const size_t first = (p.count - n) % kRecentSteps, last = (p.count - 1) % kRecentSteps;
        const PoolJudgement pj = judge_pool(std::span<const double>(in_use.data(), n), p.pool[last] - p.pool[first],
                                            p.driver[last] - p.driver[first], min_steps_);
        p.counts = pj.counts;
        if (p.count < min_steps_) continue;
        const Judgement& j = pj.in_use;
        const auto site = latest_site_.find(k);
        const LiveLeak said{device, site == latest_site_.end() ? 0 : site->second, Memory::external, j.shape,
                            LeakEvidence::pool_in_use, j.bytes_per_step, step_ - n + (pj.leaks() ? j.first_rise : j.last_high),
                            std::nullopt, library, {}};
        if (pj.leaks()) p.recent_rate = j.recent_bytes_per_step;
        if (pj.leaks() && !p.reported) {
            p.reported = true;
            p.last = said;
            found.push_back(said);
        } else if (pj.leaks()) {
            p.last.shape = j.shape;
            p.last.bytes_per_step = j.bytes_per_step;
        } else if (p.reported) {
            p.reported = false;
            found.push_back(said);
        }
    }
}

std::vector<LiveLeak> LiveMonitor::leaking() const {
    std::vector<LiveLeak> out;
    for (const auto& [k, p] : pools_)
        if (p.reported) {
            out.push_back(p.last);
            out.back().newest_blocks = newest_blocks(p.last);
        }
    for (const auto& [k, s] : series_)
        if (s.reported) {
            out.push_back(s.last);
            out.back().newest_blocks = newest_blocks(s.last);
        }
    return out;
}

std::vector<LiveLeak> LiveMonitor::end_step() {
    ++step_;
    touched_in_step_.clear();
    unit_ = 0;
    ++unit_run_;
    std::vector<LiveLeak> found;
    if (step_ > warmup_) {
        judge_pools(found);
        for (const auto& [k, all] : held_) {
            int64_t aged = all;
            for (const auto& recent : young_)
                if (auto young = recent.find(k); young != recent.end()) aged -= young->second;
            auto it = series_.find(k);
            if (it == series_.end()) {
                if (all <= 0) continue;
                it = series_.emplace(k, Series{}).first;
                // It held nothing at the step ends since warm-up: the offline series has those zeros too.
                it->second.count = std::min<size_t>(step_ - warmup_ - 1, kRecentSteps);
            }
            Series& s = it->second;
            const double aged_now = double(std::max<int64_t>(0, aged)), held_now = double(std::max<int64_t>(0, all));
            const size_t last = (s.count + kRecentSteps - 1) % kRecentSteps;
            s.steady = s.count > 0 && s.aged[last] == aged_now && s.held[last] == held_now ? s.steady + 1 : 1;
            s.aged[s.count % kRecentSteps] = aged_now;
            s.held[s.count % kRecentSteps] = held_now;
            ++s.count;
            if (s.count < min_steps_) continue;
            // A counted pool's memory: its count says what it is (judge_pools), never its driver calls.
            if (counted(uint8_t(k >> 56), Memory(uint8_t(k >> 48)), uint32_t(k))) {
                s.reported = false;
                continue;
            }
            // Step ends all alike have no rise, and the judge calls nothing without one a leak
            // (judge.h): a site not reported stays as it is, unjudged. Most sites of a training
            // run are such (parameters, optimizer state, a batch's buffers gone by the step end).
            if (!s.reported && s.steady >= std::min(s.count, kRecentSteps)) continue;
            const SiteJudgement site = judge_recent(s);
            const Judgement& j = site.leak();
            const uint8_t device = uint8_t(k >> 56);
            const auto memory = Memory(uint8_t(k >> 48));
            const size_t n = std::min(s.count, kRecentSteps);
            if (site.leaks()) s.recent_rate = j.recent_bytes_per_step;
            if (site.leaks() && !s.reported) {
                s.reported = true;
                s.last = LiveLeak{device, uint32_t(k), memory, j.shape, site.evidence(), j.bytes_per_step, step_ - n + j.first_rise, std::nullopt, {}};
                found.push_back(s.last);
            } else if (site.leaks()) {  // still leaking: its rate and shape as they are now
                s.last.shape = j.shape;
                s.last.evidence = site.evidence();
                s.last.bytes_per_step = j.bytes_per_step;
            } else if (s.reported) {
                s.reported = false;
                found.push_back(LiveLeak{device, uint32_t(k), memory, j.shape, site.evidence(), j.bytes_per_step, step_ - n + j.last_high, std::nullopt, {}});
            }
        }
    }
    for (Device& d : devices_) d.leak_rate = 0;
    for (const auto& [k, s] : series_)  // pinned memory is the host's: no device's OOM comes nearer
        if (s.reported && s.last.memory != Memory::pinned) devices_[s.last.device].leak_rate += s.recent_rate;
    for (const auto& [k, p] : pools_)
        if (p.reported) devices_[p.last.device].leak_rate += p.recent_rate;
    for (LiveLeak& leak : found) {
        if (!is_leak(leak.shape)) continue;
        const Device& d = devices_[leak.device];
        leak.projected_oom_step =
            vramscope::projected_oom_step(step_, d.capacity, uint64_t(std::max<int64_t>(0, d.peak + d.external)), d.leak_rate);
        leak.newest_blocks = newest_blocks(leak);
        if (leak.evidence == LeakEvidence::pool_in_use) pools_[pool_key(leak.device, leak.pool_library)].last = leak;
        else series_[site_key(leak.device, leak.memory, leak.site)].last = leak;
    }
    for (Device& d : devices_) {
        d.last_peak = d.peak;
        d.peak = d.allocated;
    }
    for (auto& [k, bytes] : young_[step_ % window_]) bytes = 0;  // a window ago: survivors from now on
    return found;
}

}  // namespace vramscope
