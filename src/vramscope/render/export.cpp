#include "render/export.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "analysis/judge.h"
#include "analysis/libraries.h"
#include "analysis/peak.h"
#include "analysis/phases.h"
#include "analysis/sites.h"
#include "analysis/steps.h"
#include "common/format.h"
#include "findings/json_writer.h"

namespace vramscope {
namespace {

// Pickle protocol 2, the opcodes torch's unpicklers (Python's, memory_viz's) read.
class PickleWriter {
public:
    std::string out{"\x80\x02", 2};
    void dict() { out.push_back('}'); }
    void list() { out.push_back(']'); }
    void mark() { out.push_back('('); }
    void setitems() { out.push_back('u'); }
    void appends() { out.push_back('e'); }
    void stop() { out.push_back('.'); }
    void str(std::string_view s) {
        out.push_back('X');
        u32(uint32_t(s.size()));
        out.append(s);
    }
    void none() { out.push_back('N'); }
    void boolean(bool v) { out.push_back(v ? '\x88' : '\x89'); }  // NEWTRUE, NEWFALSE
    void floating(double v) {  // BINFLOAT: big-endian
        out.push_back('G');
        uint64_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        for (int i = 7; i >= 0; --i) out.push_back(char(bits >> (8 * i)));
    }
    void integer(int64_t v) {
        if (v >= INT32_MIN && v <= INT32_MAX) {
            out.push_back('J');
            u32(uint32_t(int32_t(v)));
            return;
        }
        out.push_back('\x8a');  // LONG1: little-endian two's complement
        std::string bytes;
        for (int i = 0; i < 8; ++i) bytes.push_back(char(uint64_t(v) >> (8 * i)));
        while (bytes.size() > 1 && ((bytes.back() == 0 && !(bytes[bytes.size() - 2] & 0x80)) ||
                                    (bytes.back() == char(0xff) && (bytes[bytes.size() - 2] & 0x80))))
            bytes.pop_back();
        if (v > 0 && (bytes.back() & 0x80)) bytes.push_back(0);
        out.push_back(char(bytes.size()));
        out += bytes;
    }
    void put(uint32_t memo) {
        out.push_back('r');
        u32(memo);
    }
    void get(uint32_t memo) {
        out.push_back('j');
        u32(memo);
    }

private:
    void u32(uint32_t v) {
        for (int i = 0; i < 4; ++i) out.push_back(char(v >> (8 * i)));
    }
};

// An export grows with the trace (a memory_viz entry carries its stack's frames, 4,096 deep at
// most): it is held to what reading the trace could hold, with the trace's events and what else
// the export holds (`beside`) counted in.
void check_export_size(const Trace& t, size_t bytes, std::string_view what, uint64_t beside = 0) {
    if (kGrowthCharge * (bytes + t.events.size() * sizeof(Event)) + beside > t.limits.max_held_bytes)
        throw std::runtime_error(t.source + ": its " + std::string(what) + " would be more than " +
                                 std::to_string(t.limits.max_held_bytes >> 20) + " MiB (the limit; --max-memory raises it)");
}

// A torch snapshot's entries are its caching allocator's: memory_viz would draw a library's own
// memory, pinned host memory or NVML's figure as torch's blocks.
bool in_torch_snapshot(EventKind k) { return carries_address(k) && !is_external_event(k) && k != EventKind::device_usage; }

// Memory outside torch's allocator, and NVML's figure: a counter track each, on the devices that have them.
enum class Outside : uint8_t { external, pinned, nvml_used };
constexpr std::array<const char*, 3> kOutsideTrack = {"external", "pinned", "NVML used"};

std::optional<Outside> outside_track(EventKind k) {
    switch (k) {
    case EventKind::external_alloc:
    case EventKind::external_free: return Outside::external;
    case EventKind::pinned_alloc:
    case EventKind::pinned_free: return Outside::pinned;
    case EventKind::device_usage: return Outside::nvml_used;
    default: return std::nullopt;
    }
}

// torch's allocator as the trace leaves it: each segment with its live blocks, by address.
struct EndSegment {
    LiveSegment segment;
    std::vector<LiveBlock> blocks;
};

// Each block into the segment that holds it (both sorted by device and address); a block that no
// segment holds whole is left out: memory_viz would fail to draw it.
void place_blocks(std::vector<EndSegment>& segments, std::vector<LiveBlock> blocks) {
    std::sort(blocks.begin(), blocks.end(),
              [](const LiveBlock& a, const LiveBlock& b) { return std::pair(a.device, a.addr) < std::pair(b.device, b.addr); });
    size_t s = 0;
    for (const LiveBlock& b : blocks) {
        while (s < segments.size() && std::pair(segments[s].segment.device, segments[s].segment.addr + segments[s].segment.size) <=
                                          std::pair(b.device, b.addr))
            ++s;
        if (s == segments.size()) break;
        const LiveSegment& seg = segments[s].segment;
        if (seg.device == b.device && seg.addr <= b.addr && b.addr + b.size <= seg.addr + seg.size &&
            (segments[s].blocks.empty() || segments[s].blocks.back().addr + segments[s].blocks.back().size <= b.addr))
            segments[s].blocks.push_back(b);
    }
}


// Address ranges of one device's segments, start -> (end, stream, expandable): a segment made by
// cudaMalloc, or the mapped part of an expandable one.
struct Ranges {
    struct Range {
        uint64_t end, stream;
        bool expandable;
    };
    std::map<uint64_t, Range> by_start;

    void add(uint64_t start, uint64_t end, uint64_t stream, bool expandable) {
        auto [it, inserted] = by_start.try_emplace(start, Range{end, stream, expandable});
        if (!inserted) return;  // a second alloc of a live segment: a fault, not ours to redraw
        // An expandable segment grown in place is one segment, as torch's snapshot lists it.
        if (auto next = std::next(it); expandable && next != by_start.end() && next->first == end && next->second.expandable &&
            next->second.stream == stream)
            it->second.end = next->second.end, by_start.erase(next);
        if (it != by_start.begin()) {
            auto prev = std::prev(it);
            if (expandable && prev->second.expandable && prev->second.end == start && prev->second.stream == stream)
                prev->second.end = it->second.end, by_start.erase(it);
        }
    }
    // Takes [start, end) away; returns the parts no range held (segments made before the trace).
    std::vector<std::pair<uint64_t, uint64_t>> remove(uint64_t start, uint64_t end) {
        std::vector<std::pair<uint64_t, uint64_t>> unheld;
        uint64_t at = start;
        auto it = by_start.upper_bound(start);
        if (it != by_start.begin() && std::prev(it)->second.end > start) --it;
        while (at < end) {
            if (it == by_start.end() || it->first >= end) {
                unheld.emplace_back(at, end);
                break;
            }
            if (it->first > at) unheld.emplace_back(at, it->first);
            const uint64_t from = std::max(at, it->first), to = std::min(end, it->second.end);
            const Range r = it->second;
            const uint64_t r_start = it->first;
            it = by_start.erase(it);
            if (r_start < from) by_start.emplace(r_start, Range{from, r.stream, r.expandable});
            if (to < r.end) it = by_start.emplace(to, Range{r.end, r.stream, r.expandable}).first;
            at = to;
        }
        return unheld;
    }
    bool holds(uint64_t addr) const {
        auto it = by_start.upper_bound(addr);
        return it != by_start.begin() && std::prev(it)->second.end > addr;
    }
};

uint64_t stream_handle(const Trace& t, uint16_t stream) { return stream < t.streams.size() ? t.streams[stream] : 0; }

// A .vscope holds events alone: its segments and blocks at the end are replayed from them. A
// segment made before the capture began shows as it is freed (added from the start), or holds
// blocks outside every segment the trace saw made (one segment spanning them, as memory_viz
// draws no block outside a segment).
std::vector<EndSegment> replayed_segments(const Trace& t) {
    std::map<uint16_t, Ranges> before, live;
    // A segment's event applied; what a free finds no segment for was made before the trace.
    auto apply = [&](const Event& e, std::map<uint16_t, Ranges>* made_before) {
        const uint64_t stream = stream_handle(t, e.stream);
        if (e.kind == EventKind::segment_alloc || e.kind == EventKind::segment_map) {
            live[e.device].add(e.addr, e.addr + e.size, stream, e.kind == EventKind::segment_map);
            return;
        }
        for (const auto& [from, to] : live[e.device].remove(e.addr, e.addr + e.size))
            if (made_before) (*made_before)[e.device].add(from, to, stream, e.kind == EventKind::segment_unmap);
    };
    for (const Event& e : t.events)
        if (is_segment_event(e.kind)) apply(e, &before);
    // The blocks live at the end, and the blocks allocated where no segment was seen.
    std::map<std::pair<uint16_t, uint64_t>, LiveBlock> blocks;
    std::map<uint16_t, Ranges> unseen;
    live = before;
    for (const Event& e : t.events) {
        if (is_segment_event(e.kind)) {
            apply(e, nullptr);
        } else if (e.kind == EventKind::alloc) {
            blocks[{e.device, e.addr}] = LiveBlock{e.device, e.addr, e.size, e.size, stream_handle(t, e.stream), e.stack, false};
            constexpr size_t kHeldPerBlock = 2 * sizeof(LiveBlock) + 48;  // a map node and its copy at the end
            if ((blocks.size() & 0xFFF) == 0) check_export_size(t, blocks.size() * kHeldPerBlock, "memory_viz pickle");
            if (!live[e.device].holds(e.addr)) {
                Ranges& u = unseen[e.device];
                u.remove(e.addr, e.addr + e.size);
                u.add(e.addr, e.addr + e.size, stream_handle(t, e.stream), true);  // touching blocks make one
            }
        } else if (e.kind == EventKind::free_requested) {
            if (auto it = blocks.find({e.device, e.addr}); it != blocks.end()) it->second.pending_free = true;
        } else if (is_release(e.kind)) {
            blocks.erase({e.device, e.addr});
        }
    }
    std::vector<EndSegment> out;
    for (const auto& [device, ranges] : live)
        for (const auto& [start, r] : ranges.by_start) out.push_back({LiveSegment{device, start, r.end - start, r.stream, r.expandable}, {}});
    for (const auto& [device, ranges] : unseen)
        for (const auto& [start, r] : ranges.by_start)
            if (!live[device].holds(start) && !live[device].holds(r.end - 1))
                out.push_back({LiveSegment{device, start, r.end - start, r.stream, false}, {}});
    std::sort(out.begin(), out.end(), [](const EndSegment& a, const EndSegment& b) {
        return std::pair(a.segment.device, a.segment.addr) < std::pair(b.segment.device, b.segment.addr);
    });
    std::vector<LiveBlock> at_end;
    for (const auto& [key, b] : blocks) at_end.push_back(b);
    place_blocks(out, at_end);
    return out;
}

void value(PickleWriter& p, const SnapshotValue& v) {
    switch (v.kind) {
    case SnapshotValue::Kind::none: p.none(); break;
    case SnapshotValue::Kind::boolean: p.boolean(v.integer != 0); break;
    case SnapshotValue::Kind::integer: p.integer(v.integer); break;
    case SnapshotValue::Kind::floating: p.floating(v.floating); break;
    case SnapshotValue::Kind::string: p.str(v.string); break;
    case SnapshotValue::Kind::list:
    case SnapshotValue::Kind::dict:
        v.kind == SnapshotValue::Kind::dict ? p.dict() : p.list();
        p.mark();
        for (const auto& [key, item] : v.items) {
            if (v.kind == SnapshotValue::Kind::dict) p.str(key);
            value(p, item);
        }
        v.kind == SnapshotValue::Kind::dict ? p.setitems() : p.appends();
        break;
    }
}

// The allocator's state at the trace's end: a snapshot's own segments, else replayed.
std::vector<EndSegment> segments_at_end(const Trace& t) {
    if (t.final_segments.empty() && t.final_blocks.empty()) return replayed_segments(t);
    std::vector<EndSegment> out;
    for (const LiveSegment& s : t.final_segments) out.push_back({s, {}});
    std::sort(out.begin(), out.end(), [](const EndSegment& a, const EndSegment& b) {
        return std::pair(a.segment.device, a.segment.addr) < std::pair(b.segment.device, b.segment.addr);
    });
    place_blocks(out, t.final_blocks);
    return out;
}

}  // namespace

std::string to_memory_viz_pickle(const Trace& t) {
    PickleWriter p;
    uint16_t devices = 1;
    for (const Event& e : t.events) devices = std::max<uint16_t>(devices, uint16_t(e.device + 1));
    // Stacks, frames and strings are pickled once each and referred to through the memo after:
    // the output grows with what the trace holds, not with how often it is used.
    std::unordered_map<uint32_t, uint32_t> memo_of_stack, memo_of_frame, memo_of_string;
    uint32_t next_memo = 0;
    auto once = [&](std::unordered_map<uint32_t, uint32_t>& memo, uint32_t id, auto&& write) {
        auto [it, inserted] = memo.try_emplace(id, next_memo);
        if (!inserted) return p.get(it->second);
        ++next_memo;
        write();
        p.put(it->second);
    };
    auto string = [&](uint32_t id) { once(memo_of_string, id, [&] { p.str(t.stacks.string(id)); }); };
    auto frames = [&](uint32_t stack) {
        once(memo_of_stack, stack, [&] {
            p.list();
            p.mark();
            for (uint32_t f : t.stacks.frames_of(stack)) {
                once(memo_of_frame, f, [&] {
                    const Frame& fr = t.stacks.frame(f);
                    p.dict();
                    p.mark();
                    p.str("filename");
                    string(fr.file);
                    p.str("line");
                    p.integer(fr.line);
                    p.str("name");
                    string(fr.function);
                    p.setitems();
                });
            }
            p.appends();
        });
    };
    auto entry = [&](const Event& e, std::string_view action) {
        check_export_size(t, p.out.size(), "memory_viz pickle");
        p.dict();
        p.mark();
        p.str("action");
        p.str(action);
        p.str(e.kind == EventKind::oom ? "device_free" : "addr");
        p.integer(int64_t(e.addr));
        p.str("size");
        p.integer(int64_t(e.size));
        p.str("stream");
        p.integer(int64_t(e.stream < t.streams.size() ? t.streams[e.stream] : 0));
        p.str("time_us");
        p.integer(e.time_us);
        p.str("frames");
        frames(e.stack);
        p.setitems();
    };
    p.dict();
    p.mark();
    p.str("segments");
    p.list();
    p.mark();
    for (const EndSegment& es : segments_at_end(t)) {
        check_export_size(t, p.out.size(), "memory_viz pickle");
        const LiveSegment& seg = es.segment;
        uint64_t active = 0, requested = 0;
        for (const LiveBlock& b : es.blocks) active += b.size, requested += b.requested_size;
        p.dict();
        p.mark();
        p.str("device"), p.integer(seg.device);
        p.str("address"), p.integer(int64_t(seg.addr));
        p.str("total_size"), p.integer(int64_t(seg.size));
        p.str("allocated_size"), p.integer(int64_t(active));
        p.str("active_size"), p.integer(int64_t(active));
        p.str("requested_size"), p.integer(int64_t(requested));
        p.str("stream"), p.integer(int64_t(seg.stream));
        p.str("is_expandable"), p.boolean(seg.expandable);
        p.str("frames"), frames(0);
        // Blocks tile the segment, free gaps as inactive blocks: both viewers walk them by size.
        p.str("blocks");
        p.list();
        p.mark();
        uint64_t at = seg.addr;
        auto block = [&](uint64_t addr, uint64_t size, uint64_t asked, std::string_view state, uint32_t stack) {
            p.dict();
            p.mark();
            p.str("address"), p.integer(int64_t(addr));
            p.str("size"), p.integer(int64_t(size));
            p.str("requested_size"), p.integer(int64_t(asked));
            p.str("state"), p.str(state);
            p.str("frames"), frames(stack);
            p.setitems();
        };
        for (const LiveBlock& b : es.blocks) {
            if (b.addr > at) block(at, b.addr - at, 0, "inactive", 0);
            block(b.addr, b.size, b.requested_size, b.pending_free ? "active_pending_free" : "active_allocated", b.stack);
            at = b.addr + b.size;
        }
        if (at < seg.addr + seg.size) block(at, seg.addr + seg.size - at, 0, "inactive", 0);
        p.appends();
        p.setitems();
    }
    p.appends();
    p.str("device_traces");
    p.list();
    p.mark();
    for (uint16_t d = 0; d < devices; ++d) {
        p.list();
        p.mark();
        size_t in_batch = 0;
        for (const Event& e : t.events) {
            if (e.device != d || !in_torch_snapshot(e.kind)) continue;
            if (e.kind == EventKind::free) {  // torch >= 2.1 spells a whole free as two entries
                entry(e, "free_requested");
                entry(e, "free_completed");
                in_batch += 2;
            } else {
                entry(e, event_kind_name(e.kind));
                ++in_batch;
            }
            if (in_batch >= 1000) {  // APPENDS in batches, as pickle does: unpicklers' stacks stay small
                p.appends();
                p.mark();
                in_batch = 0;
            }
        }
        p.appends();
    }
    p.appends();
    // Named regions (optimizer.step, record_function), as torch's recorder lists them.
    p.str("external_annotations");
    p.list();
    p.mark();
    for (const Event& e : t.events) {
        if (e.kind != EventKind::annotation_start && e.kind != EventKind::annotation_end) continue;
        check_export_size(t, p.out.size(), "memory_viz pickle");
        p.dict();
        p.mark();
        p.str("device"), p.integer(e.device);
        p.str("stage"), p.str(e.kind == EventKind::annotation_start ? "START" : "END");
        p.str("name"), string(e.name);
        p.str("time_us"), p.integer(e.time_us);
        p.setitems();
    }
    p.appends();
    if (t.allocator_settings.kind != SnapshotValue::Kind::none) {
        p.str("allocator_settings");
        value(p, t.allocator_settings);
    }
    p.setitems();
    p.stop();
    return p.out;
}

// The peak's categories (analysis/peak.h) over the whole run, a counter track each. A block's
// category follows from its lifetime, known once it is freed: this pass gives each allocation's
// (by event index) for the drawing pass to add and take back. The phase a block is compared with is
// its own allocation's: a temporary is freed in the phase it was allocated in, as one live at the
// peak is in the phase the peak fell in.
constexpr uint8_t kNoCategory = 0xff;
uint64_t block_key(const Event& e) { return (e.addr >> 9) ^ (uint64_t(e.device) << 56); }

std::vector<uint8_t> allocation_categories(const Trace& t, const Findings& f, const Steps& steps) {
    std::vector<uint8_t> out(t.events.size(), kNoCategory);
    std::vector<const SourceLine*> leaking;
    for (const SiteFinding& l : f.leaks)
        if (l.memory == Memory::torch && confirmed(l.confidence)) leaking.push_back(&l.site);
    for (const WithinStepLeak& l : f.within_step) leaking.push_back(&l.site);
    bool backward_known = false;
    for (const DevicePeak& p : f.peaks) backward_known |= p.backward_marked || p.backward_inferred;
    struct Open {
        size_t event;
        uint64_t phase_count;
        bool leaks;
        PeakMember m;
    };
    std::unordered_map<uint64_t, Open> live;
    std::unordered_map<uint32_t, std::pair<bool, bool>> of_site;  // by site frame: (no Python frame, leaks)
    PhaseClock phases(t.stacks);
    SiteResolver sites(t.stacks);
    uint32_t step = 0;
    size_t next_end = 0;
    const auto close = [&](Open& o) { out[o.event] = uint8_t(peak_category(o.m, o.leaks, backward_known, f.step_count)); };
    for (size_t i = 0; i < t.events.size(); ++i) {
        const Event& e = t.events[i];
        phases.see(e);
        if (e.kind == EventKind::alloc) {
            const uint32_t frame = sites.site(e.stack);
            auto [at, fresh] = of_site.try_emplace(frame);
            if (fresh && frame) {  // the strings read in place: a trace's may be long
                const Frame& fr = t.stacks.frame(frame);
                const std::string_view file = t.stacks.string(fr.file), function = t.stacks.string(fr.function);
                at->second.first = is_cpp_file(file);
                for (const SourceLine* l : leaking)
                    at->second.second |= l->line == fr.line && l->file == file && l->function == function;
            } else if (fresh) {
                at->second = {true, false};
            }
            phases.allocated(at->second.first);
            Open o{i, phases.count(), at->second.second, {}};
            o.m.size = e.size;
            o.m.alloc_step = step;
            o.m.alloc_phase = phases.now();
            o.m.in_peak_phase = true;
            live[block_key(e)] = o;
        } else if (is_release(e.kind)) {
            if (auto it = live.find(block_key(e)); it != live.end()) {
                Open& o = it->second;
                o.m.freed = true;
                o.m.freed_in_peak_phase = phases.count() == o.phase_count;
                o.m.free_phase = phases.now();
                o.m.free_step = step;
                close(o);
                live.erase(it);
            }
        }
        if (next_end < steps.ends.size() && steps.ends[next_end] == i) {
            ++next_end, ++step;
            phases.step_ended();
        }
    }
    for (auto& [key, o] : live) close(o);
    return out;
}

std::string to_perfetto_json(const Trace& t, const Findings& f) {
    Json j;
    j.open('{');
    j.field("displayTimeUnit", "ms");
    j.key("traceEvents");
    j.open('[');
    // The findings' timelines and each event's category are held while the export grows.
    uint64_t beside = t.events.size();
    for (const DeviceSummary& d : f.devices) beside += kGrowthCharge * d.timeline.size() * sizeof(StepPoint);
    auto event = [&](const char* ph, const std::string& name, int64_t ts, auto&& fill) {
        check_export_size(t, j.out.size(), "Perfetto trace", beside);
        j.open('{');
        j.field("ph", ph);
        j.field("name", name);
        j.field("pid", uint64_t(1));
        j.field("tid", uint64_t(1));
        j.field("ts", uint64_t(std::max<int64_t>(0, ts)));  // integer µs: a double would round them
        fill();
        j.close('}');
    };
    event("M", "process_name", 0, [&] {
        j.key("args");
        j.open('{');
        j.field("name", "vramscope: " + f.source);
        j.close('}');
    });
    const Steps steps = find_steps(t);
    // A device is sampled at a step's end only when it changed since its last sample: every
    // device at every step would be devices x steps counters from a file of step markers.
    struct Level {
        int64_t allocated = 0, reserved = 0, last_sample = INT64_MIN;
        bool changed = true;  // each device is drawn once at least
    };
    std::map<uint8_t, Level> level;
    struct Track {
        int64_t bytes = 0, last_sample = INT64_MIN;
        bool changed = false;
    };
    std::map<std::pair<uint8_t, Outside>, Track> outside;  // only those the trace has
    auto sample_outside = [&](std::pair<uint8_t, Outside> at, Track& track, int64_t ts) {
        track.last_sample = ts;
        track.changed = false;
        event("C", f.device_name(at.first) + " " + kOutsideTrack[size_t(at.second)], ts, [&] {
            j.key("args");
            j.open('{');
            j.field("bytes", uint64_t(std::max<int64_t>(0, track.bytes)));
            j.close('}');
        });
    };
    for (const DeviceInfo& d : t.devices) level[uint8_t(d.device)] = {int64_t(d.baseline_allocated), int64_t(d.baseline_reserved)};
    const std::vector<uint8_t> category_of = allocation_categories(t, f, steps);
    std::map<uint8_t, std::array<int64_t, kPeakCategories>> by_category;  // live bytes, by device
    std::unordered_map<uint64_t, uint8_t> live_category;
    auto sample = [&](uint8_t device, int64_t ts) {
        Level& l = level[device];
        l.last_sample = ts;
        l.changed = false;
        event("C", f.device_name(device) + " memory", ts, [&] {
            j.key("args");
            j.open('{');
            j.field("allocated", uint64_t(std::max<int64_t>(0, l.allocated)));
            if (!f.host_memory(device)) j.field("reserved", uint64_t(std::max<int64_t>(0, l.reserved)));
            j.close('}');
        });
        const auto categories = by_category.find(device);
        if (categories == by_category.end()) return;
        event("C", f.device_name(device) + " by category", ts, [&] {
            j.key("args");
            j.open('{');
            for (size_t c = 0; c < kPeakCategories; ++c)
                if (PeakCategory(c) != PeakCategory::before_trace)
                    j.field(name(PeakCategory(c)).data(), uint64_t(std::max<int64_t>(0, categories->second[c])));
            j.close('}');
        });
    };
    size_t next_end = 0;
    int64_t step_start = t.events.empty() ? 0 : t.events.front().time_us;
    std::vector<int64_t> step_starts;
    for (size_t i = 0; i < t.events.size(); ++i) {
        const Event& e = t.events[i];
        Level& l = level[e.device];
        switch (e.kind) {
        case EventKind::alloc:
            l.allocated += int64_t(e.size);
            if (category_of[i] != kNoCategory) {
                by_category[e.device][category_of[i]] += int64_t(e.size);
                live_category[block_key(e)] = category_of[i];
            }
            break;
        case EventKind::free_completed:
        case EventKind::free:
            l.allocated -= int64_t(e.size);
            if (auto it = live_category.find(block_key(e)); it != live_category.end()) {
                by_category[e.device][it->second] -= int64_t(e.size);
                live_category.erase(it);
            }
            break;
        case EventKind::segment_alloc:
        case EventKind::segment_map: l.reserved += int64_t(e.size); break;
        case EventKind::segment_free:
        case EventKind::segment_unmap: l.reserved -= int64_t(e.size); break;
        default: break;
        }
        if (is_block_event(e.kind) || is_segment_event(e.kind)) {
            l.changed = true;
            if (e.time_us >= l.last_sample + 1000) sample(e.device, e.time_us);  // not a - b: b starts at INT64_MIN
        }
        if (const auto kind = outside_track(e.kind)) {
            const std::pair<uint8_t, Outside> at{e.device, *kind};
            Track& track = outside[at];
            track.bytes = e.kind == EventKind::device_usage ? int64_t(e.size)
                          : is_external_alloc(e.kind)      ? track.bytes + int64_t(e.size)
                                                           : track.bytes - int64_t(e.size);
            track.changed = true;
            // NVML is read at step ends, a thousandth of the run's time at most: every reading is drawn.
            if (e.kind == EventKind::device_usage || e.time_us >= track.last_sample + 1000) sample_outside(at, track, e.time_us);
        }
        if (next_end < steps.ends.size() && steps.ends[next_end] == i) {
            for (auto& [device, lv] : level)
                if (lv.changed) sample(device, e.time_us);
            for (auto& [at, track] : outside)
                if (track.changed) sample_outside(at, track, e.time_us);
            step_starts.push_back(step_start);
            event("X", "step " + std::to_string(next_end), step_start, [&] {
                j.field("dur", uint64_t(std::max<int64_t>(0, e.time_us - step_start)));
                j.field("cat", "step");
            });
            step_start = e.time_us;
            ++next_end;
        }
    }
    for (const SiteFinding& leak : f.leaks) {
        if (leak.first_step >= step_starts.size()) continue;
        const std::string whose = leak.memory == Memory::torch ? "" : " (" + std::string(name(leak.memory)) +
                                                                          (leak.library.empty() ? "" : ": " + leak.library) + ")";
        event("i", "leak starts: " + base_name(leak.site.file) + ":" +
                       std::to_string(leak.site.line) + " " + leak.site.function + whose,
              step_starts[leak.first_step], [&] {
                  j.field("s", "g");
                  j.key("args");
                  j.open('{');
                  j.bytes_field("bytes_per_step", leak.bytes_per_step);
                  j.field("memory", name(leak.memory));
                  if (!leak.library.empty()) j.field("library", leak.library);
                  j.close('}');
              });
    }
    j.close(']');
    j.close('}');
    j.out.push_back('\n');
    return j.out;
}

}  // namespace vramscope
