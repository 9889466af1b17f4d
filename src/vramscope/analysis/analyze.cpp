#include "analysis/analyze.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <unordered_map>

#include "analysis/fit.h"
#include "analysis/flat_map.h"
#include "analysis/sites.h"
#include "analysis/steps.h"
#include "common/format.h"

namespace vramscope {
namespace {

constexpr uint32_t kNever = 0xFFFFFFFFu;

struct Alloc {
    uint64_t addr, size;
    uint32_t stack;
    uint32_t step;
    uint32_t free_step = kNever;  // step in which the allocator got it back
    uint16_t stream;              // index into Trace::streams
    uint8_t device;
};

struct Replay {
    std::vector<Alloc> allocs;
    std::vector<DeviceSummary> devices;
    size_t full_steps = 0;
    size_t entries = 0;  // as torch counts them (Trace::entry_count)
};

size_t device_index(std::vector<DeviceSummary>& devs, uint16_t device) {
    for (size_t i = 0; i < devs.size(); ++i)
        if (devs[i].device == device) return i;
    devs.push_back(DeviceSummary{device});
    return devs.size() - 1;
}

Replay replay(const Trace& t, const Steps& steps) {
    Replay r;
    r.full_steps = steps.ends.size();
    struct State {
        int64_t allocated, reserved, pending, peak;
        std::vector<int64_t> by_stream;  // by stream index
    };
    std::vector<State> state;
    for (const DeviceInfo& d : t.devices) {
        device_index(r.devices, d.device);
        r.devices.back().total_memory = d.total_memory;
        if (d.total_memory) r.devices.back().capacity_source = "trace";
        const auto a = int64_t(d.baseline_allocated);
        state.push_back({a, int64_t(d.baseline_reserved), 0, a, std::vector<int64_t>(t.streams.size(), 0)});
    }
    std::array<int16_t, 256> slot_of_device;  // the hot path's device lookup
    slot_of_device.fill(-1);
    auto dev = [&](uint8_t device) -> size_t {
        if (slot_of_device[device] >= 0) return size_t(slot_of_device[device]);
        size_t i = device_index(r.devices, device);
        if (i >= state.size()) state.push_back({0, 0, 0, 0, std::vector<int64_t>(t.streams.size(), 0)});
        slot_of_device[device] = int16_t(i);
        return i;
    };
    std::vector<uint8_t> requested;  // by alloc index: free_requested seen
    r.allocs.reserve(t.events.size() / 2);  // an alloc is rarely more than half the events
    requested.reserve(t.events.size() / 2);
    AddressMap live(4096);

    uint32_t step = 0;
    size_t next_end = 0;
    auto close_step = [&] {
        for (size_t i = 0; i < r.devices.size(); ++i) {
            State& s = state[i];
            StepPoint p{uint64_t(std::max<int64_t>(0, s.allocated)), uint64_t(std::max<int64_t>(0, s.reserved)),
                        uint64_t(std::max<int64_t>(0, s.peak)), uint64_t(std::max<int64_t>(0, s.pending)), {}};
            for (size_t k = 0; k < s.by_stream.size(); ++k)
                if (s.by_stream[k] > 0) p.by_stream.emplace_back(t.streams[k], uint64_t(s.by_stream[k]));
            r.devices[i].timeline.push_back(std::move(p));
            s.peak = s.allocated;
        }
    };
    for (size_t i = 0; i < t.events.size(); ++i) {
        const Event& e = t.events[i];
        const uint64_t key = e.addr ^ (uint64_t(e.device) << 56);
        r.entries += 1 + (e.kind == EventKind::free);
        switch (e.kind) {
        case EventKind::alloc: {
            State& s = state[dev(e.device)];
            live.put(key, uint32_t(r.allocs.size()));
            r.allocs.push_back(Alloc{e.addr, e.size, e.stack, step, kNever, e.stream, e.device});
            requested.push_back(0);
            s.allocated += int64_t(e.size);
            s.by_stream[e.stream] += int64_t(e.size);
            s.peak = std::max(s.peak, s.allocated);
            break;
        }
        case EventKind::free_requested: {
            const uint32_t a = live.get(key);
            if (a != AddressMap::kMissing && !requested[a]) {
                requested[a] = 1;
                state[dev(e.device)].pending += int64_t(r.allocs[a].size);
            }
            break;
        }
        case EventKind::free_completed:
        case EventKind::free: {
            State& s = state[dev(e.device)];
            const uint32_t a = live.take(key);
            if (a != AddressMap::kMissing) {
                r.allocs[a].free_step = step;
                if (requested[a]) s.pending -= int64_t(r.allocs[a].size);
                s.by_stream[r.allocs[a].stream] -= int64_t(r.allocs[a].size);
            }
            s.allocated -= int64_t(e.size);
            break;
        }
        case EventKind::segment_alloc:
        case EventKind::segment_map: state[dev(e.device)].reserved += int64_t(e.size); break;
        case EventKind::segment_free:
        case EventKind::segment_unmap: state[dev(e.device)].reserved -= int64_t(e.size); break;
        case EventKind::oom: {
            const size_t i = dev(e.device);
            DeviceSummary& d = r.devices[i];
            if (!d.oom_step) d.oom_step = step;
            // Free memory the driver reported then, plus what torch held: the device's capacity,
            // less other processes' share.
            if (!d.total_memory) {
                d.total_memory = e.addr + uint64_t(std::max<int64_t>(0, state[i].reserved));
                d.capacity_source = "oom-event";
            }
            break;
        }
        default: break;
        }
        if (next_end < steps.ends.size() && steps.ends[next_end] == i) {
            close_step();
            ++step;
            ++next_end;
        }
    }
    const bool has_tail = steps.ends.empty() ? !t.events.empty() : steps.ends.back() + 1 < t.events.size();
    if (has_tail) close_step();
    return r;
}

SourceLine source_line(const StackTable& table, uint32_t frame) {
    if (frame == 0) return SourceLine{"<no Python frame: autograd engine or C++ thread>", 0, ""};
    const Frame& f = table.frame(frame);
    return SourceLine{std::string(table.string(f.file)), f.line, std::string(table.string(f.function))};
}

std::vector<SourceLine> stack_lines(const StackTable& table, uint32_t stack) {
    std::vector<SourceLine> out;
    for (uint32_t f : table.frames_of(stack)) out.push_back(source_line(table, f));
    return out;
}

// One allocation site on one device, with the series analysis judges.
struct SiteSeries {
    uint16_t device;
    uint32_t site_frame;
    std::vector<double> survived;  // bytes allocated in step k still live at the end of k+window
    std::vector<double> live;      // bytes from this site live at each full step's end
    std::map<uint32_t, uint64_t> bytes_by_stack;
    uint64_t surviving_allocations = 0;
    std::vector<std::pair<uint64_t, uint64_t>> live_blocks;
};

size_t auto_warmup(size_t steps) {
    if (steps < 4) return 0;
    return std::clamp<size_t>(steps / 10, 1, 5);
}

std::string mib(double bytes) { return format_bytes(bytes); }

}  // namespace

Findings analyze(const Trace& t, const AnalysisOptions& opt) {
    const auto started = std::chrono::steady_clock::now();
    Findings f;
    f.source = t.source;
    f.format = t.format;
    f.warnings = t.warnings;
    f.window = std::max<uint32_t>(1, opt.window);
    for (const auto& kv : t.meta) f.meta.push_back(kv);
    // Input that cannot be trusted gets no verdict and no analysis (importers/validate.h says
    // why): numbers from it would only mislead.
    if (!t.faults.empty()) {
        f.verdict = "cannot-judge";
        f.input_faults = t.faults;
        f.event_count = t.entry_count();
        return f;
    }

    const Steps steps = find_steps(t);
    f.steps_source = steps.source;
    f.steps_detail = steps.detail;
    Replay r = replay(t, steps);
    f.event_count = r.entries;
    const size_t S = r.full_steps;
    f.step_count = S;
    const size_t s0 = opt.warmup_steps >= 0 ? std::min<size_t>(size_t(opt.warmup_steps), S) : auto_warmup(S);
    f.warmup_steps = s0;
    const size_t w = f.window;
    // Steps whose survivors can be judged: the window must have elapsed inside the trace.
    const bool judgeable = S >= s0 + w + 3;
    const size_t last_judged = judgeable ? S - 1 - w : 0;

    bool has_memory_events = false;
    for (const Event& e : t.events) {
        if (is_block_event(e.kind) || is_segment_event(e.kind)) {
            has_memory_events = true;
            break;
        }
    }
    if (!has_memory_events) {
        if (!t.final_blocks.empty())
            f.notes.push_back("This snapshot has no trace history, only the memory state at the moment it was taken, so "
                              "growth over steps cannot be measured. Record one with "
                              "torch.cuda.memory._record_memory_history(max_entries=1000000) before the training loop "
                              "and torch.cuda.memory._dump_snapshot(\"snap.pickle\") after a few steps, or capture live "
                              "with `vramscope run`.");
        else
            f.notes.push_back("The input holds no memory events.");
    } else if (!judgeable) {
        f.notes.push_back("Only " + std::to_string(S) + " full steps found (source: " + steps.source +
                          "); at least " + std::to_string(s0 + w + 3) +
                          " are needed to tell a leak from warm-up. Record more steps.");
    }

    // Which sites ever left survivors: only those get per-step series.
    SiteResolver resolver(t.stacks);
    std::unordered_map<uint64_t, size_t> series_of;
    std::vector<SiteSeries> series;
    std::vector<uint32_t> site_of_alloc(r.allocs.size());
    for (size_t i = 0; i < r.allocs.size(); ++i) {
        const Alloc& a = r.allocs[i];
        site_of_alloc[i] = resolver.site(a.stack);
        if (!judgeable || a.step > last_judged) continue;
        if (a.free_step != kNever && a.free_step <= a.step + w) continue;
        const uint64_t key = uint64_t(a.device) << 32 | site_of_alloc[i];
        auto [it, inserted] = series_of.try_emplace(key, series.size());
        if (inserted) {
            series.push_back(SiteSeries{a.device, site_of_alloc[i]});
            series.back().survived.assign(S, 0);
            series.back().live.assign(S + 1, 0);
        }
        SiteSeries& s = series[it->second];
        s.survived[a.step] += double(a.size);
        s.bytes_by_stack[a.stack] += a.size;
        ++s.surviving_allocations;
    }
    // Live bytes per step end, from every allocation of those sites (difference array).
    std::vector<std::map<uint64_t, uint64_t>> stream_bytes(series.size());
    for (size_t i = 0; i < r.allocs.size(); ++i) {
        const Alloc& a = r.allocs[i];
        if (a.step >= S) continue;
        auto it = series_of.find(uint64_t(a.device) << 32 | site_of_alloc[i]);
        if (it == series_of.end()) continue;
        SiteSeries& s = series[it->second];
        const size_t end = std::min<size_t>(a.free_step, S);
        if (end > a.step) {
            s.live[a.step] += double(a.size);
            s.live[end] -= double(a.size);
        }
        if (a.free_step == kNever) {
            stream_bytes[it->second][t.streams[a.stream]] += a.size;
            if (s.live_blocks.size() < 4096) s.live_blocks.emplace_back(a.addr, a.size);
        }
    }
    for (SiteSeries& s : series) {
        for (size_t k = 1; k <= S; ++k) s.live[k] += s.live[k - 1];
        s.live.resize(S);
    }

    // Device-level growth, for shares and for the not-leak explanations.
    std::map<uint16_t, LineFit> device_alloc_fit;
    for (DeviceSummary& d : r.devices) {
        std::vector<double> alloc;
        for (size_t k = 0; k < S; ++k) alloc.push_back(double(d.timeline[k].allocated));
        if (judgeable) device_alloc_fit[d.device] = fit_line(alloc, s0, S - 1);
    }

    std::map<uint16_t, double> leak_rate;
    std::map<uint16_t, std::map<uint64_t, uint64_t>> leaked_by_stream;
    uint64_t warmup_bytes = 0;
    std::vector<std::pair<uint64_t, SourceLine>> warmup_sites;
    const size_t judged = judgeable ? last_judged - s0 + 1 : 0;
    for (size_t si = 0; si < series.size(); ++si) {
        SiteSeries& s = series[si];
        SiteFinding sf;
        sf.device = s.device;
        sf.site = source_line(t.stacks, s.site_frame);
        uint32_t best_stack = 0;
        uint64_t best_bytes = 0;
        for (const auto& [stack, bytes] : s.bytes_by_stack)
            if (bytes > best_bytes) best_bytes = bytes, best_stack = stack;
        sf.stack = stack_lines(t.stacks, best_stack);
        uint64_t stream_best = 0;
        for (const auto& [stream, bytes] : stream_bytes[si])
            if (bytes > stream_best) stream_best = bytes, sf.stream = stream;
        sf.surviving_allocations = s.surviving_allocations;
        sf.live_bytes = uint64_t(s.live[S - 1]);
        sf.peak_bytes = uint64_t(*std::max_element(s.live.begin(), s.live.end()));
        sf.live_blocks = std::move(s.live_blocks);
        sf.held.assign(s.live.begin(), s.live.end());
        size_t recurring = 0;
        bool first_set = false;
        for (size_t k = 0; k <= last_judged; ++k) {
            if (s.survived[k] <= 0) continue;
            if (!first_set) sf.first_step = k, first_set = true;
            if (k >= s0) ++recurring;
        }
        sf.recurrence = judged ? double(recurring) / double(judged) : 0;
        const LineFit fit = fit_line(s.live, s0, S - 1);
        const size_t mid = s0 + (S - 1 - s0) / 2;
        const LineFit late = fit_line(s.live, mid, S - 1);
        const double span = double(S - 1 - s0);
        const double growth = s.live[S - 1] - s.live[s0];
        sf.bytes_per_step = fit.slope;
        sf.fit_r2 = fit.r2;
        const bool grows = fit.slope > 0 && growth >= 0.5 * fit.slope * span && fit.r2 >= 0.6;
        const bool still_growing = late.slope >= 0.5 * fit.slope;
        // A leak need not strike every step (every 10th, at each eval): it must recur and the
        // site's hold must rise along a line to the end. Confidence grows with how many steps
        // showed it, not with how often: a steady staircase is as sure as a ramp.
        if (recurring >= 2 && grows && still_growing) {
            sf.confidence = std::clamp(fit.r2, 0.0, 1.0) * std::min(1.0, double(recurring) / 5.0) *
                            std::min(1.0, double(judged) / 8.0);
            const LineFit& dfit = device_alloc_fit[s.device];
            sf.share_of_growth = dfit.slope > 0 ? std::min(1.0, fit.slope / dfit.slope) : 0;
            leak_rate[s.device] += fit.slope;
            for (const auto& [stream, bytes] : stream_bytes[si]) leaked_by_stream[s.device][stream] += bytes;
            f.leaks.push_back(std::move(sf));
        } else if (recurring == 0) {
            warmup_bytes += sf.live_bytes;
            warmup_sites.emplace_back(sf.live_bytes, sf.site);
        } else if (recurring >= 2 && sf.peak_bytes > 0) {
            NotLeak n;
            n.kind = "bounded-cache";
            n.bytes = sf.peak_bytes;
            n.site = sf.site;
            n.device = sf.device;
            n.why = "allocations here outlive their step in " + std::to_string(recurring) + " of " +
                    std::to_string(judged) + " steps, but the total held levels off at " + mib(double(sf.peak_bytes)) +
                    " (now " + mib(double(sf.live_bytes)) + "): a cache with a bound, not a leak";
            f.not_leaks.push_back(std::move(n));
        }
    }
    std::sort(f.leaks.begin(), f.leaks.end(),
              [](const SiteFinding& a, const SiteFinding& b) { return a.bytes_per_step > b.bytes_per_step; });
    if (warmup_bytes > 0) {
        std::sort(warmup_sites.begin(), warmup_sites.end(), [](auto& a, auto& b) { return a.first > b.first; });
        NotLeak n;
        n.kind = "warm-up";
        n.bytes = warmup_bytes;
        n.site = warmup_sites.front().second;
        n.why = mib(double(warmup_bytes)) + " allocated in the first " + std::to_string(s0) +
                " steps and kept since (parameters, optimizer state, workspaces), from " +
                std::to_string(warmup_sites.size()) + " sites; it does not grow afterwards. Largest:";
        for (size_t k = 0; k < warmup_sites.size() && k < 3; ++k) {
            const SourceLine& at = warmup_sites[k].second;
            n.why += (k ? ", " : " ") + mib(double(warmup_sites[k].first)) + " at " +
                     (at.line ? base_name(at.file) + ":" + std::to_string(at.line) : at.file);
        }
        f.not_leaks.push_back(std::move(n));
    }

    for (DeviceSummary& d : r.devices) {
        if (opt.device_memory) {
            d.total_memory = opt.device_memory;
            d.capacity_source = "--device-memory";
        }
        const uint64_t capacity = d.total_memory;
        std::map<uint64_t, uint64_t> live_by_stream;
        for (const Alloc& a : r.allocs)
            if (a.device == d.device && a.free_step == kNever) live_by_stream[t.streams[a.stream]] += a.size;
        for (const auto& [stream, bytes] : live_by_stream)
            d.streams.push_back(StreamUsage{stream, bytes, leaked_by_stream[d.device][stream]});
        if (!judgeable) continue;
        const double rate = leak_rate[d.device];
        const StepPoint& last = d.timeline[S - 1];
        if (rate > 0 && capacity > 0) {
            const double headroom = capacity > last.peak_allocated ? double(capacity - last.peak_allocated) : 0;
            d.projected_oom_step = (S - 1) + uint64_t(std::ceil(headroom / rate));
            if (!f.projected_oom_step || *d.projected_oom_step < *f.projected_oom_step)
                f.projected_oom_step = d.projected_oom_step;
        }
        const StepPoint& first = d.timeline[s0];
        const double alloc_growth = double(last.allocated) - double(first.allocated);
        const double reserved_growth = double(last.reserved) - double(first.reserved);
        if (reserved_growth >= double(2 << 20) && alloc_growth <= 0.1 * reserved_growth) {
            NotLeak n;
            n.kind = "fragmentation";
            n.bytes = uint64_t(reserved_growth);
            n.device = d.device;
            n.why = "reserved grew by " + mib(reserved_growth) + " over steps " + std::to_string(s0) + ".." +
                    std::to_string(S - 1) + " while allocated moved " + mib(alloc_growth) +
                    ": the caching allocator keeps freed blocks of sizes it cannot reuse for new requests "
                    "(varying shapes). Not a leak; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces it";
            f.not_leaks.push_back(std::move(n));
        }
        double min_peak = 1e300, max_peak = 0;
        for (size_t k = s0; k < S; ++k) {
            min_peak = std::min(min_peak, double(d.timeline[k].peak_allocated));
            max_peak = std::max(max_peak, double(d.timeline[k].peak_allocated));
        }
        if (min_peak > 0 && max_peak > 1.2 * min_peak && std::fabs(alloc_growth) < 0.1 * (max_peak - min_peak)) {
            NotLeak n;
            n.kind = "activation-peaks";
            n.bytes = uint64_t(max_peak - min_peak);
            n.device = d.device;
            n.why = "the peak inside a step ranges from " + mib(min_peak) + " to " + mib(max_peak) +
                    " while memory at step end stays level: input sizes vary from step to step";
            f.not_leaks.push_back(std::move(n));
        }
        if (last.reserved > last.allocated && last.reserved - last.allocated >= std::max<uint64_t>(last.reserved / 10, 1 << 20)) {
            NotLeak n;
            n.kind = "cached-free";
            n.bytes = last.reserved - last.allocated;
            n.device = d.device;
            n.why = mib(double(n.bytes)) + " of the " + mib(double(last.reserved)) +
                    " reserved is free memory kept in torch's cache for reuse (nvidia-smi counts it as used)";
            f.not_leaks.push_back(std::move(n));
        }
    }
    if (!has_memory_events && !t.final_blocks.empty()) {
        std::unordered_map<uint32_t, uint64_t> by_site;
        uint64_t total = 0;
        for (const LiveBlock& b : t.final_blocks) {
            by_site[resolver.site(b.stack)] += b.size;
            total += b.size;
        }
        std::vector<std::pair<uint64_t, uint32_t>> top;
        for (const auto& [site, bytes] : by_site) top.emplace_back(bytes, site);
        std::sort(top.rbegin(), top.rend());
        std::string line = "The snapshot shows " + mib(double(total)) + " allocated in " +
                           std::to_string(t.final_blocks.size()) + " blocks and " + mib(double(t.final_reserved)) +
                           " reserved. Largest holders:";
        for (size_t i = 0; i < top.size() && i < 5; ++i) {
            SourceLine s = source_line(t.stacks, top[i].second);
            line += "\n  " + mib(double(top[i].first)) + "  " + s.file + ":" + std::to_string(s.line) + " " + s.function;
        }
        f.notes.push_back(line);
    }

    double total_rate = 0;
    for (const SiteFinding& l : f.leaks)
        if (l.confidence >= 0.5) total_rate += l.bytes_per_step;
    f.leak_bytes_per_step = total_rate;
    f.verdict = total_rate > 0 ? "leak" : "no-leak";
    // Nothing to judge is no "no leak" either: the notes above say what is missing.
    if (!has_memory_events) {
        f.verdict = "cannot-judge";
        f.input_faults.push_back(t.source + ": no memory events: nothing to judge");
    }
    f.devices = std::move(r.devices);
    f.analysis_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return f;
}

}  // namespace vramscope
