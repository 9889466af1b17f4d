#include "render/export.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>

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
// most): it is held to what reading the trace could hold.
void check_export_size(const Trace& t, size_t bytes, std::string_view what) {
    if (bytes > t.limits.max_held_bytes)
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
    p.setitems();
    p.stop();
    return p.out;
}

std::string to_perfetto_json(const Trace& t, const Findings& f) {
    Json j;
    j.open('{');
    j.field("displayTimeUnit", "ms");
    j.key("traceEvents");
    j.open('[');
    auto event = [&](const char* ph, const std::string& name, int64_t ts, auto&& fill) {
        check_export_size(t, j.out.size(), "Perfetto trace");
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
    };
    size_t next_end = 0;
    int64_t step_start = t.events.empty() ? 0 : t.events.front().time_us;
    std::vector<int64_t> step_starts;
    for (size_t i = 0; i < t.events.size(); ++i) {
        const Event& e = t.events[i];
        Level& l = level[e.device];
        switch (e.kind) {
        case EventKind::alloc: l.allocated += int64_t(e.size); break;
        case EventKind::free_completed:
        case EventKind::free: l.allocated -= int64_t(e.size); break;
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
                  j.field("bytes_per_step", leak.bytes_per_step);
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
