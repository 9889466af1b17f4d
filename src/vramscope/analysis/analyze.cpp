#include "analysis/analyze.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "analysis/fit.h"
#include "analysis/flat_map.h"
#include "analysis/judge.h"
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
    if (frame == 0) return SourceLine{kNoPythonFrame, 0, ""};
    const Frame& f = table.frame(frame);
    return SourceLine{std::string(table.string(f.file)), f.line, std::string(table.string(f.function))};
}

std::vector<SourceLine> stack_lines(const StackTable& table, uint32_t stack) {
    std::vector<SourceLine> out;
    for (uint32_t f : table.frames_of(stack)) out.push_back(source_line(table, f));
    return out;
}

// Leading frames to skip when a stack is shown: the C++ frames (unwinder, allocator, dispatcher)
// that torch's stacks="all" puts before the first Python frame, and a dispatch mode's own frames
// with the wrappers torch calls it through (a live-tensor capture records from inside one): shown
// from the op's caller. A stack of machinery alone shows whole.
size_t machinery_frames(const std::vector<SourceLine>& stack) {
    size_t first = 0;
    while (first < stack.size() && is_cpp_file(stack[first].file)) ++first;
    for (size_t i = first; i < stack.size() && i < first + 4; ++i) {
        if (stack[i].function != "__torch_dispatch__") continue;
        const auto wrapper = [](const std::string& file) {
            return file.ends_with("/torch/_dynamo/eval_frame.py") || file.ends_with("/torch/_compile.py");
        };
        for (first = i + 1; first < stack.size() && wrapper(stack[first].file);) ++first;
        break;
    }
    return first < stack.size() ? first : 0;
}

// One allocation site on one device, with the series analysis judges.
struct SiteSeries {
    uint16_t device;
    uint32_t site_frame;
    std::vector<double> survived;  // bytes allocated in step k still live at the end of k+window
    std::vector<double> held;      // bytes from this site live at each full step's end
    std::vector<double> aged;      // of those, allocated `window` or more steps before: what the judge reads
    std::map<uint32_t, uint64_t> bytes_by_stack;
    uint64_t surviving_allocations = 0;
    std::vector<std::pair<uint64_t, uint64_t>> live_blocks;
};

std::string mib(double bytes) { return format_bytes(bytes); }

// Live blocks grouped by site: the total, the largest site, and the top five as text.
struct Holders {
    uint64_t bytes = 0;
    uint32_t top_site = 0;
    std::string text;
};

Holders largest_holders(const std::vector<LiveBlock>& blocks, SiteResolver& resolver, const StackTable& table) {
    Holders h;
    std::unordered_map<uint32_t, uint64_t> by_site;
    for (const LiveBlock& b : blocks) {
        by_site[resolver.site(b.stack)] += b.size;
        h.bytes += b.size;
    }
    std::vector<std::pair<uint64_t, uint32_t>> top;
    for (const auto& [site, bytes] : by_site) top.emplace_back(bytes, site);
    std::sort(top.rbegin(), top.rend());
    if (!top.empty()) h.top_site = top.front().second;
    for (size_t i = 0; i < top.size() && i < 5; ++i) {
        const SourceLine s = source_line(table, top[i].second);
        h.text += (i ? ", " : " ") + mib(double(top[i].first)) + " at " +
                  (s.line ? base_name(s.file) + ":" + std::to_string(s.line) + " " + s.function : s.file);
    }
    return h;
}

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
        f.verdict = Verdict::cannot_judge;
        f.input_faults = t.faults;
        f.event_count = t.entry_count();
        return f;
    }

    Steps steps = find_steps(t);
    f.steps_source = steps.source;
    f.steps_detail = steps.detail;
    size_t first_memory_event = t.events.size();
    for (size_t i = 0; i < t.events.size(); ++i)
        if (is_block_event(t.events[i].kind) || is_segment_event(t.events[i].kind)) {
            first_memory_event = i;
            break;
        }
    const bool has_memory_events = first_memory_event < t.events.size();
    // Steps that ended before the first memory event were never seen (a ring buffer that wrapped
    // keeps annotations of the whole run, entries of its end only): judging them would average
    // the growth over steps the trace does not hold.
    if (has_memory_events) {
        const auto seen = std::lower_bound(steps.ends.begin(), steps.ends.end(), first_memory_event);
        f.steps_before_trace = uint64_t(seen - steps.ends.begin());
        steps.ends.erase(steps.ends.begin(), seen);
    }
    Replay r = replay(t, steps);
    f.event_count = r.entries;
    const size_t S = r.full_steps;
    f.step_count = S;
    size_t s0 = opt.warmup_steps >= 0 ? std::min<size_t>(size_t(opt.warmup_steps), S) : warmup_steps(S);
    // The first step of a trace that starts mid-run is cut short: never judged.
    const bool starts_mid_run =
        f.steps_before_trace > 0 ||
        std::any_of(t.devices.begin(), t.devices.end(), [](const DeviceInfo& d) { return d.baseline_allocated > 0; });
    if (starts_mid_run && S > 0) s0 = std::max<size_t>(s0, 1);
    f.warmup_steps = s0;
    const size_t w = f.window;
    // Steps whose survivors can be judged: kMinSteps step ends after warm-up, and the window
    // must have elapsed inside the trace.
    const bool judgeable = has_memory_events && S >= s0 + std::max<size_t>(kMinSteps, w + 3);
    const size_t last_judged = judgeable ? S - 1 - w : 0;
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
        f.notes.push_back("Only " + std::to_string(S) + " full steps found (from " + std::string(describe(steps.source)) +
                          "); at least " + std::to_string(s0 + std::max<size_t>(kMinSteps, w + 3)) +
                          " are needed to tell a leak from warm-up or a cache. Record more steps.");
    }
    if (f.steps_before_trace > 0)
        f.notes.push_back("The trace covers the last " + std::to_string(S) + " full steps of a run of at least " +
                          std::to_string(S + f.steps_before_trace) + " (" + std::to_string(f.steps_before_trace) +
                          " steps ended before its first memory event: torch's ring buffer of max_entries wrapped, "
                          "or recording began late); rates and steps are judged over the steps it covers, counted "
                          "from its start.");

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
            series.back().held.assign(S + 1, 0);
            series.back().aged.assign(S + 1, 0);
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
        // Held at a step end by blocks at least `window` steps old: what a step leaves behind,
        // not the batch it is still working with (the judge's series, live and offline alike).
        const size_t end = std::min<size_t>(a.free_step, S), from = a.step + w;
        if (end > a.step) {
            s.held[a.step] += double(a.size);
            s.held[end] -= double(a.size);
        }
        if (end > from) {
            s.aged[from] += double(a.size);
            s.aged[end] -= double(a.size);
        }
        if (a.free_step == kNever) {
            stream_bytes[it->second][t.streams[a.stream]] += a.size;
            // Blocks the judge counted (a window old): the last steps' are still in loop locals.
            if (s.live_blocks.size() < 4096 && from < S) s.live_blocks.emplace_back(a.addr, a.size);
        }
    }
    for (SiteSeries& s : series) {
        for (size_t k = 1; k <= S; ++k) s.held[k] += s.held[k - 1], s.aged[k] += s.aged[k - 1];
        s.held.resize(S);
        s.aged.resize(S);
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
        sf.stack_shown_from = machinery_frames(sf.stack);
        uint64_t stream_best = 0;
        for (const auto& [stream, bytes] : stream_bytes[si])
            if (bytes > stream_best) stream_best = bytes, sf.stream = stream;
        sf.surviving_allocations = s.surviving_allocations;
        sf.live_bytes = uint64_t(s.held[S - 1]);
        sf.peak_bytes = uint64_t(*std::max_element(s.held.begin(), s.held.end()));
        sf.live_blocks = std::move(s.live_blocks);
        sf.held.assign(s.held.begin(), s.held.end());
        size_t recurring = 0;
        bool first_set = false;
        for (size_t k = 0; k <= last_judged; ++k) {
            if (s.survived[k] <= 0) continue;
            if (!first_set) sf.first_step = k, first_set = true;
            if (k >= s0) ++recurring;
        }
        sf.recurrence = judged ? double(recurring) / double(judged) : 0;
        const Judgement j = judge(std::span<const double>(s.aged).subspan(s0));
        sf.shape = j.shape;
        sf.bytes_per_step = j.bytes_per_step;
        sf.recent_bytes_per_step = j.recent_bytes_per_step;
        sf.fit_r2 = j.r2;
        // Confidence grows with how many steps showed the leak, not with how often: a leak that
        // strikes every 10th step, as a steady staircase, is as sure as a ramp.
        if (is_leak(j.shape) && recurring >= 2) {
            sf.confidence = std::clamp(j.r2, 0.0, 1.0) * std::min(1.0, double(recurring) / 5.0) *
                            std::min(1.0, double(judged) / 8.0);
            const LineFit& dfit = device_alloc_fit[s.device];
            sf.share_of_growth = dfit.slope > 0 ? std::min(1.0, j.bytes_per_step / dfit.slope) : 0;
            leak_rate[s.device] += j.recent_bytes_per_step;
            for (const auto& [stream, bytes] : stream_bytes[si]) leaked_by_stream[s.device][stream] += bytes;
            f.leaks.push_back(std::move(sf));
        } else if (recurring == 0 || j.shape == Shape::warm_up) {
            warmup_bytes += sf.live_bytes;
            warmup_sites.emplace_back(sf.live_bytes, sf.site);
        } else if (j.shape == Shape::bounded && sf.peak_bytes > 0) {
            NotLeak n;
            n.kind = NotLeakKind::bounded_cache;
            n.bytes = sf.peak_bytes;
            n.site = sf.site;
            n.device = sf.device;
            n.why = "allocations here outlive their step in " + std::to_string(recurring) + " of " +
                    std::to_string(judged) + " steps; what it holds rose to a high at step " +
                    std::to_string(s0 + j.last_high) + ", then made no new high in the last " +
                    std::to_string(S - 1 - s0 - j.last_high) + " steps (at most " + mib(double(sf.peak_bytes)) +
                    ", now " + mib(double(sf.live_bytes)) + "): a cache with a bound, not a leak";
            f.not_leaks.push_back(std::move(n));
        }
    }
    std::sort(f.leaks.begin(), f.leaks.end(),
              [](const SiteFinding& a, const SiteFinding& b) { return a.bytes_per_step > b.bytes_per_step; });
    if (warmup_bytes > 0) {
        std::sort(warmup_sites.begin(), warmup_sites.end(), [](auto& a, auto& b) { return a.first > b.first; });
        NotLeak n;
        n.kind = NotLeakKind::warm_up;
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
        d.projected_oom_step = projected_oom_step(S - 1, capacity, last.peak_allocated, rate);
        if (d.projected_oom_step && (!f.projected_oom_step || *d.projected_oom_step < *f.projected_oom_step))
            f.projected_oom_step = d.projected_oom_step;
        const StepPoint& first = d.timeline[s0];
        const double alloc_growth = double(last.allocated) - double(first.allocated);
        const double reserved_growth = double(last.reserved) - double(first.reserved);
        if (reserved_growth >= double(2 << 20) && alloc_growth <= 0.1 * reserved_growth) {
            NotLeak n;
            n.kind = NotLeakKind::fragmentation;
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
            n.kind = NotLeakKind::activation_peaks;
            n.bytes = uint64_t(max_peak - min_peak);
            n.device = d.device;
            n.why = "the peak inside a step ranges from " + mib(min_peak) + " to " + mib(max_peak) +
                    " while memory at step end stays level: input sizes vary from step to step";
            f.not_leaks.push_back(std::move(n));
        }
        if (last.reserved > last.allocated && last.reserved - last.allocated >= std::max<uint64_t>(last.reserved / 10, 1 << 20)) {
            NotLeak n;
            n.kind = NotLeakKind::cached_free;
            n.bytes = last.reserved - last.allocated;
            n.device = d.device;
            n.why = mib(double(n.bytes)) + " of the " + mib(double(last.reserved)) +
                    " reserved is free memory kept in torch's cache for reuse (nvidia-smi counts it as used)";
            f.not_leaks.push_back(std::move(n));
        }
    }
    if (!has_memory_events && !t.final_blocks.empty()) {
        const Holders h = largest_holders(t.final_blocks, resolver, t.stacks);
        f.notes.push_back("The snapshot shows " + mib(double(h.bytes)) + " allocated in " +
                          std::to_string(t.final_blocks.size()) + " blocks and " + mib(double(t.final_reserved)) +
                          " reserved. Largest holders:" + h.text);
    }
    if (has_memory_events && starts_mid_run) {
        // Blocks the snapshot still lists but the trace never saw allocated: they predate it.
        std::unordered_set<uint64_t> seen_live;
        for (const Alloc& a : r.allocs)
            if (a.free_step == kNever) seen_live.insert(a.addr ^ uint64_t(a.device) << 56);
        std::vector<LiveBlock> before;
        for (const LiveBlock& b : t.final_blocks)
            if (!seen_live.count(b.addr ^ uint64_t(b.device) << 56)) before.push_back(b);
        uint64_t baseline = 0;
        for (const DeviceInfo& d : t.devices) baseline += d.baseline_allocated;
        if (!before.empty() || baseline > 0) {
            NotLeak n;
            n.kind = NotLeakKind::before_trace;
            if (before.empty()) {
                n.bytes = baseline;
                n.why = mib(double(baseline)) + " was allocated before the trace's first event; the trace cannot say where";
            } else {
                const Holders h = largest_holders(before, resolver, t.stacks);
                n.bytes = h.bytes;
                n.site = source_line(t.stacks, h.top_site);
                n.why = mib(double(h.bytes)) + " in " + std::to_string(before.size()) +
                        " blocks allocated before the trace's first event and still live at its end (from the "
                        "snapshot's segments, with the stacks torch kept); too old to judge. Largest holders:" + h.text;
            }
            f.not_leaks.push_back(std::move(n));
        }
    }

    double total_rate = 0;
    for (const SiteFinding& l : f.leaks)
        if (l.confidence >= 0.5) total_rate += l.bytes_per_step;
    f.leak_bytes_per_step = total_rate;
    f.verdict = total_rate > 0 ? Verdict::leak : judgeable ? Verdict::no_leak : Verdict::cannot_judge;
    // Nothing to judge is no "no leak" either: the notes above say what is missing.
    if (!has_memory_events) f.input_faults.push_back(t.source + ": no memory events: nothing to judge");
    f.devices = std::move(r.devices);
    f.analysis_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return f;
}

}  // namespace vramscope
