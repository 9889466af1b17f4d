#include "trace/reader.h"

#include "common/progress.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <vector>

#include "common/chunk_source.h"
#include "common/file.h"
#include "common/inflate.h"
#include "common/read_ahead.h"
#include "trace/format.h"
#include "trace/predict.h"
#include "trace/varint.h"

namespace vramscope {
using namespace format;

namespace {

// Deltas from a hostile file may overflow: they wrap (and validate_events() faults the result).
int64_t wrapping_add(int64_t a, int64_t b) { return int64_t(uint64_t(a) + uint64_t(b)); }

uint32_t get_u32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }

struct ChunkError {
    size_t offset;
    std::string why;
};
// Not damage but a limit (ReadLimits) reached: an error for the whole input, naming the option.
struct OverLimit {
    size_t offset;
    std::string why;
};

// Decodes one chunk's records into the trace. File ids map to table ids through the remap
// vectors, so a hostile file with duplicate definitions cannot point outside the tables.
class ChunkDecoder {
public:
    ChunkDecoder(Trace& t, const ReadLimits& limits, uint16_t version)
        : t_(t), limits_(limits), later_kinds_(version >= 3), pool_readings_(version >= 4), strings_(1, 0), frames_(1, 0), stacks_(1, 0), depth_(1, 0) {}

    // The event count of the end record, once one was read.
    std::optional<uint64_t> end_events;

    // Decodes a chunk; with `batch` > 0, its events go to `sink` every `batch` events as they come,
    // while still in cache. Returns how many it decoded; throws ChunkError with `handed_on` set
    // when some had gone to the sink already.
    uint64_t decode(const uint8_t* begin, const uint8_t* end, size_t batch, const ChunkSink& sink) {
        base_ = begin;
        handed_on = 0;
        size_t start = t_.events.size();
        left_ = batch ? ptrdiff_t(batch) : PTRDIFF_MAX;
        const uint8_t* p = begin;
        uint8_t device = 0;
        uint16_t stream = 0;
        uint64_t* last_addr = nullptr;  // of the current context
        std::fill(last_addr_.begin(), last_addr_.end(), 0);
        int64_t time = 0;
        while (p < end) {
            if (left_ <= 0) [[unlikely]] {
                handed_on += t_.events.size() - start;
                sink(t_);  // mid-chunk: its answer waits for the chunk's end
                start = t_.events.size();
                left_ = ptrdiff_t(batch);
            }
            const uint8_t* at = p;
            uint8_t tag = *p++;
            switch (tag) {
            case tag_meta: {
                std::string_view k = bytes(p, end, at), v = bytes(p, end, at);
                t_.meta[std::string(k)] = std::string(v);
                break;
            }
            case tag_device: {
                DeviceInfo d;
                const uint64_t device = num(p, end, at);
                // Events name 8-bit devices: a larger number would be another device cut short.
                if (device > 0xFF) throw ChunkError{size_t(at - base_), "device number out of range"};
                d.device = uint16_t(device);
                d.total_memory = num(p, end, at);
                d.baseline_allocated = num(p, end, at);
                d.baseline_reserved = num(p, end, at);
                t_.device(d.device) = d;
                break;
            }
            case tag_string: {
                const uint64_t shared = num(p, end, at), common = shared >> 3, back = shared & 7;
                if (back + 1 >= strings_.size() && common > 0) throw ChunkError{size_t(at - base_), "string refers to an undefined one"};
                const std::string_view prev = common ? t_.stacks.string(strings_[strings_.size() - 1 - back]) : std::string_view();
                if (common > prev.size()) throw ChunkError{size_t(at - base_), "string shares more than its predecessor has"};
                const std::string_view rest = bytes(p, end, at);
                count_string_bytes(common + rest.size(), at);
                std::string s(prev.substr(0, size_t(common)));
                s += rest;
                strings_.push_back(t_.stacks.intern_string(s));
                break;
            }
            case tag_frame: {
                Frame f;
                f.file = ref(strings_, num(p, end, at), at);
                f.function = ref(strings_, num(p, end, at), at);
                f.line = uint32_t(num(p, end, at));
                frames_.push_back(t_.stacks.intern_frame(f));
                break;
            }
            case tag_stack: {
                // No writer keeps more frames than the limit (live capture: 256): deeper is damage,
                // and would make every walk of a stack as long as the file.
                const uint64_t file_parent = num(p, end, at);
                const uint32_t parent = ref(stacks_, file_parent, at);
                const uint32_t frame = ref(frames_, num(p, end, at), at);
                if (depth_[file_parent] >= limits_.max_stack_frames)
                    throw ChunkError{size_t(at - base_), "a stack deeper than " + std::to_string(limits_.max_stack_frames) + " frames"};
                stacks_.push_back(t_.stacks.intern_stack(parent, frame));
                depth_.push_back(depth_[file_parent] + 1);
                break;
            }
            case tag_context: {
                const uint64_t i = num(p, end, at);
                if (i == contexts_.size()) {
                    const uint64_t d = num(p, end, at);
                    if (d > 0xFF) throw ChunkError{size_t(at - base_), "device number out of range"};
                    t_.device(uint16_t(d));
                    contexts_.emplace_back(uint8_t(d), t_.stream_index(num(p, end, at)));
                    last_addr_.push_back(0);
                } else if (i > contexts_.size()) {
                    throw ChunkError{size_t(at - base_), "reference to an undefined id"};
                }
                device = contexts_[i].first;
                stream = contexts_[i].second;
                last_addr = &last_addr_[i];
                break;
            }
            case tag_chunk_time: time = unzigzag(num(p, end, at)); break;
            case tag_end: end_events = num(p, end, at); break;
            default: decode_event(tag, p, end, at, device, stream, last_addr, time);
            }
        }
        return handed_on + (t_.events.size() - start);
    }
    uint64_t handed_on = 0;  // of the chunk in hand, to the sink

private:
    // A string shares its predecessor's prefix: each the whole previous one plus a byte would make
    // strings quadratic in the file's size. What they decode to is held to the limits instead,
    // twice (StackTable keeps each string and its index's key), with what the two cost beside
    // their bytes (the string objects, their heap blocks, the index's node).
    void count_string_bytes(uint64_t n, const uint8_t* at) {
        constexpr uint64_t kPerString = 128;
        if (n > limits_.max_string_bytes)
            throw OverLimit{size_t(at - base_), "a string of " + std::to_string(n) + " bytes, over the " +
                                                    std::to_string(limits_.max_string_bytes >> 20) +
                                                    " MiB limit (--max-string raises it)"};
        if ((string_bytes_ += 2 * n + kPerString) > limits_.max_held_bytes)
            throw OverLimit{size_t(at - base_), "strings decoding to more than " + std::to_string(limits_.max_held_bytes >> 20) +
                                                    " MiB (the limit; --max-memory raises it)"};
    }

    // An event record: its tag says its kind and how its fields are stored (format.h). Each kind
    // has a decoder of its own (event<>), where what the kind decides is decided at compile time.
    [[gnu::always_inline]] void decode_event(uint8_t tag, const uint8_t*& p, const uint8_t* end, const uint8_t* at, uint8_t device,
                                             uint16_t stream, uint64_t* last_addr, int64_t& time) {
        unsigned shift = kAlignShift;
        if (tag == tag_unaligned) {
            if (p >= end) throw ChunkError{size_t(at - base_), "record cut short"};
            tag = *p++;
            shift = 0;
        }
        static_assert(kFirstLaterKind + kLaterKinds == kEventKindCount, "a kind without a tag, or a tag without a kind");
        static_assert(kEventKindCount == 20, "the cases below: a kind each");
        const State st{tag, shift, at, device, stream, last_addr};
        using K = EventKind;
        constexpr auto tag_of = [](EventKind k) { return tag_of_kind(uint8_t(k)); };
        switch (tag & kTypeMask) {
        case tag_of(K::alloc): return event<K::alloc, Form::plain>(st, p, end, time);
        case tag_of(K::free_requested): return event<K::free_requested, Form::plain>(st, p, end, time);
        case tag_of(K::free_completed): return event<K::free_completed, Form::plain>(st, p, end, time);
        case tag_of(K::segment_alloc): return rare_event<K::segment_alloc>(st, p, end, time);
        case tag_of(K::segment_free): return rare_event<K::segment_free>(st, p, end, time);
        case tag_of(K::segment_map): return rare_event<K::segment_map>(st, p, end, time);
        case tag_of(K::segment_unmap): return rare_event<K::segment_unmap>(st, p, end, time);
        case tag_of(K::oom): return rare_event<K::oom>(st, p, end, time);
        case tag_of(K::step): return rare_event<K::step>(st, p, end, time);
        case tag_of(K::microbatch): return rare_event<K::microbatch>(st, p, end, time);
        case tag_of(K::annotation_start): return rare_event<K::annotation_start>(st, p, end, time);
        case tag_of(K::annotation_end): return rare_event<K::annotation_end>(st, p, end, time);
        case tag_of(K::snapshot): return rare_event<K::snapshot>(st, p, end, time);
        case tag_of(K::free): return event<K::free, Form::plain>(st, p, end, time);
        case tag_free_pair_later: return event<K::free_requested, Form::pair>(st, p, end, time);
        case tag_alloc_reused: return event<K::alloc, Form::reused>(st, p, end, time);
        default: break;
        }
        // The kinds of memory outside torch's allocator came with version 3: in an older file their tags are damage.
        if (later_kinds_) switch (tag & kTypeMask) {
            case tag_of(K::external_alloc): return rare_event<K::external_alloc>(st, p, end, time);
            case tag_of(K::external_free): return rare_event<K::external_free>(st, p, end, time);
            case tag_of(K::pinned_alloc): return rare_event<K::pinned_alloc>(st, p, end, time);
            case tag_of(K::pinned_free): return rare_event<K::pinned_free>(st, p, end, time);
            case tag_of(K::device_usage): return rare_event<K::device_usage>(st, p, end, time);
            default: break;
            }
        // A library pool's reading came with version 4.
        if (pool_readings_ && (tag & kTypeMask) == tag_of(K::pool_usage)) return pool_event(st, p, end, time);
        throw ChunkError{size_t(at - base_), "unknown record tag"};
    }

    // How an event record stores its fields: as its kind's (plain), a free_requested with its
    // free_completed later (pair), or an alloc at the predicted address (reused).
    enum class Form { plain, pair, reused };
    // What decode_event() knows of a record before its fields.
    struct State {
        uint8_t tag;
        unsigned shift;         // of addresses and sizes: 0 when unaligned
        const uint8_t* at;      // the record's first byte
        uint8_t device;
        uint16_t stream;
        uint64_t* last_addr;    // of the current context
    };

    // The mirror of TraceWriter::emit_block_locked: same field order, same guesses. The block
    // events' are inlined into decode() (a call per event cost a tenth of its instructions), the
    // rarer kinds' called (rare_event), to keep decode()'s code small.
    template <EventKind kKind, Form kForm>
    [[gnu::always_inline]] void event(State st, const uint8_t*& p, const uint8_t* end, int64_t& time) {
        const uint8_t tag = st.tag;
        const uint8_t* at = st.at;
        Event& e = t_.events.emplace_back();
        --left_;
        e.kind = kKind;
        e.device = st.device;
        e.stream = st.stream;
        if (!(tag & kSameTime)) time = wrapping_add(time, unzigzag(num(p, end, at)));
        e.time_us = time;
        if constexpr (!carries_address(kKind)) {
            e.name = ref(strings_, num(p, end, at), at);
        } else {
            if (!st.last_addr) throw ChunkError{size_t(at - base_), "event before its device and stream"};
            constexpr bool is_alloc = kKind == EventKind::alloc;
            auto get_addr = [&]() __attribute__((always_inline)) {
                if constexpr (kForm == Form::reused) {
                    e.addr = guess_.alloc_address(e.size);
                } else {
                    if (!is_alloc && !has_stack(kKind) && (tag & kGuessed)) {
                        if (p >= end) throw ChunkError{size_t(at - base_), "record cut short"};
                        const uint8_t j = *p++;
                        if (j >= format::Predictors::kRecent) throw ChunkError{size_t(at - base_), "recent-allocation index out of range"};
                        e.addr = guess_.recent(j);
                    } else {
                        e.addr = uint64_t(wrapping_add(int64_t(*st.last_addr >> st.shift), unzigzag(num(p, end, at)))) << st.shift;
                    }
                }
                *st.last_addr = e.addr;
            };
            if constexpr (!is_alloc) get_addr();
            uint64_t file_stack = 0;
            if constexpr (has_stack(kKind)) {
                file_stack = (tag & kGuessed) ? guess_.next_stack() : num(p, end, at);
                e.stack = ref(stacks_, file_stack, at);
            }
            e.size = (tag & kSizeKnown) ? guess_.size(kKind, e.addr, file_stack) : num(p, end, at) << st.shift;
            if constexpr (is_alloc) get_addr();
            guess_.update(kKind, e.addr, e.size, file_stack);
            if constexpr (kForm == Form::pair) {
                time = wrapping_add(time, int64_t(num(p, end, at)));
                Event completed = e;  // a copy: the next emplace may move e
                completed.kind = EventKind::free_completed;
                completed.time_us = time;
                t_.events.push_back(completed);
                --left_;
                guess_.update(EventKind::free_completed, completed.addr, completed.size, 0);
            }
        }
    }

    // The mirror of TraceWriter::emit_locked's pool reading: Δtime, library, pool bytes, bytes in use.
    [[gnu::noinline]] void pool_event(State st, const uint8_t*& p, const uint8_t* end, int64_t& time) {
        if (st.tag & (kGuessed | kSizeKnown) || st.shift == 0) throw ChunkError{size_t(st.at - base_), "a pool reading with flags it cannot have"};
        if (!st.last_addr) throw ChunkError{size_t(st.at - base_), "event before its device and stream"};
        Event& e = t_.events.emplace_back();
        --left_;
        e.kind = EventKind::pool_usage;
        e.device = st.device;
        e.stream = st.stream;
        if (!(st.tag & kSameTime)) time = wrapping_add(time, unzigzag(num(p, end, st.at)));
        e.time_us = time;
        e.name = ref(strings_, num(p, end, st.at), st.at);
        e.addr = num(p, end, st.at);
        e.size = num(p, end, st.at);
    }

    template <EventKind kKind>
    [[gnu::noinline]] void rare_event(State st, const uint8_t*& p, const uint8_t* end, int64_t& time) {
        event<kKind, Form::plain>(st, p, end, time);
    }

    // Most fields fit one byte, nearly all the rest two: those inline, longer ones out of line.
    [[gnu::always_inline]] uint64_t num(const uint8_t*& p, const uint8_t* end, const uint8_t* at) {
        if (p < end && *p < 0x80) [[likely]] return *p++;
        if (end - p >= 2 && p[1] < 0x80) {
            const uint64_t v = uint64_t(p[0] & 0x7f) | uint64_t(p[1]) << 7;
            p += 2;
            return v;
        }
        return long_num(p, end, at);
    }
    [[gnu::noinline]] uint64_t long_num(const uint8_t*& p, const uint8_t* end, const uint8_t* at) {
        uint64_t v;
        if (!get_varint(p, end, v)) throw ChunkError{size_t(at - base_), "record cut short"};
        return v;
    }
    std::string_view bytes(const uint8_t*& p, const uint8_t* end, const uint8_t* at) {
        uint64_t n = num(p, end, at);
        if (n > uint64_t(end - p)) throw ChunkError{size_t(at - base_), "string longer than its chunk"};
        std::string_view s(reinterpret_cast<const char*>(p), size_t(n));
        p += n;
        return s;
    }
    [[gnu::always_inline]] uint32_t ref(const std::vector<uint32_t>& ids, uint64_t id, const uint8_t* at) {
        if (id >= ids.size()) throw ChunkError{size_t(at - base_), "reference to an undefined id"};
        return ids[id];
    }

    Trace& t_;
    const ReadLimits& limits_;
    const bool later_kinds_;  // event tags 26..30 (version 3)
    const bool pool_readings_;  // event tag 31 (version 4)
    uint64_t string_bytes_ = 0;  // held for the string records decoded so far
    const uint8_t* base_ = nullptr;
    std::vector<uint32_t> strings_, frames_, stacks_;
    std::vector<uint32_t> depth_;  // frames in each file stack id's stack
    std::vector<std::pair<uint8_t, uint16_t>> contexts_;  // (device, stream index)
    std::vector<uint64_t> last_addr_;                     // per context
    format::Predictors guess_;  // the writer's, replayed
    // Events the sink takes in: counted down as they are decoded (the vector's size per record
    // cost eight instructions).
    ptrdiff_t left_ = 0;
};

}  // namespace

bool has_vscope_magic(std::string_view bytes) {
    return bytes.size() >= sizeof kMagic && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0;
}

namespace {
// Exact byte counts from a ChunkSource, across its pieces: a view into the piece when it holds
// them all (the usual case), else a copy into one reused buffer.
class ExactReader {
public:
    ExactReader(ChunkSource& in, std::string_view first) : in_(in), piece_(first) {}
    // n bytes, fewer only at the end of the input; valid until the next call.
    std::string_view take(size_t n) {
        if (piece_.size() >= n) return advance(n);
        buffer_.assign(piece_.begin(), piece_.end());
        offset_ += piece_.size();
        piece_ = {};
        while (buffer_.size() < n && in_.next(piece_)) {
            const size_t k = std::min(n - buffer_.size(), piece_.size());
            buffer_.append(piece_.substr(0, k));
            piece_.remove_prefix(k);
            offset_ += k;
        }
        return buffer_;
    }
    uint64_t offset() const { return offset_; }

private:
    std::string_view advance(size_t n) {
        const std::string_view out = piece_.substr(0, n);
        piece_.remove_prefix(n);
        offset_ += n;
        return out;
    }
    ChunkSource& in_;
    std::string_view piece_;
    std::string buffer_;
    uint64_t offset_ = 0;
};
}  // namespace

std::optional<size_t> stream_trace(std::string_view first, ChunkSource& rest, uint64_t total_bytes, const std::string& name,
                                   const ReadLimits& limits, Trace& trace, const ChunkSink& sink, size_t batch, size_t whole) {
    ExactReader in(rest, first);
    const std::string_view header = in.take(kHeaderBytes);
    if (!has_vscope_magic(header)) throw std::runtime_error(name + ": offset 0: not a .vscope trace (bad magic)");
    if (header.size() < kHeaderBytes) throw std::runtime_error(name + ": offset 8: header cut short");
    const auto* h0 = reinterpret_cast<const uint8_t*>(header.data());
    const uint16_t version = uint16_t(h0[8] | h0[9] << 8);
    if (version < kOldestVersion || version > kVersion)
        throw std::runtime_error(name + ": offset 8: trace format version " + std::to_string(version) +
                                 " is not supported (this build reads versions " + std::to_string(kOldestVersion) +
                                 " to " + std::to_string(kVersion) + ")");
    const bool numbered = version >= 2;
    trace.source = name;
    trace.format = "vscope";
    trace.limits = limits;
    if (!numbered)
        trace.warnings.push_back(name + ": trace format version 1: its chunks carry no numbers and it has no end "
                                        "record, so a chunk repeated, dropped or cut off at a chunk boundary cannot be told");
    ChunkDecoder decoder(trace, limits, version);
    size_t chunks = 0;
    uint64_t decoded = 0;  // events, whether the sink kept them or not
    auto stop = [&](uint64_t at, const std::string& why, std::vector<std::string>& into) {
        into.push_back(name + ": offset " + std::to_string(at) + ": " + why + "; read " + std::to_string(chunks) +
                       " whole chunks (" + std::to_string(decoded) + " events) and ignored the remaining " +
                       std::to_string(total_bytes - std::min(at, total_bytes)) + " bytes");
    };
    bool at_end = false;  // all input read, no damage
    while (true) {
        const uint64_t off = in.offset();
        const std::string_view chunk_header = in.take(kChunkHeaderBytes);
        if (chunk_header.empty()) {
            at_end = true;
            break;
        }
        if (decoder.end_events) {
            stop(off, "data after the end record", trace.faults);
            break;
        }
        if (chunk_header.size() < kChunkHeaderBytes) {
            stop(off, "file cut inside a chunk header", trace.warnings);
            break;
        }
        const auto* h = reinterpret_cast<const uint8_t*>(chunk_header.data());
        const uint32_t len = get_u32(h + 4), crc = get_u32(h + 8);
        if (get_u32(h) != kChunkMagic) {
            stop(off, "bad chunk magic", trace.faults);
            break;
        }
        if (len > kMaxChunkPayload) {
            stop(off, "chunk length out of range", trace.faults);
            break;
        }
        const std::string_view body = in.take(len);
        if (body.size() < len) {
            stop(off, "file cut inside a chunk", trace.warnings);
            break;
        }
        const auto* payload = reinterpret_cast<const uint8_t*>(body.data());
        if (crc32_of(payload, len) != crc) {
            stop(off, "chunk checksum mismatch", trace.faults);
            break;
        }
        const uint8_t* records = payload;
        if (numbered) {
            uint64_t seq = 0;
            const uint8_t* p = payload + 1;
            if (len == 0 || payload[0] != tag_chunk_seq || !get_varint(p, payload + len, seq)) {
                stop(off, "chunk without its number", trace.faults);
                break;
            }
            if (seq != chunks) {
                stop(off, seq < chunks ? "chunk " + std::to_string(seq) + " again, where chunk " + std::to_string(chunks) +
                                             " belongs (a repeated or swapped chunk)"
                                       : "chunk " + std::to_string(seq) + " where chunk " + std::to_string(chunks) +
                                             " belongs (chunks missing or swapped)",
                     trace.faults);
                break;
            }
            records = p;
        }
        // A chunk that passed its checksum but does not decode came from a broken writer: keep
        // what came before it rather than half of it.
        const size_t events_before = trace.events.size();
        uint64_t chunk_events = 0;
        try {
            chunk_events = decoder.decode(records, payload + len, chunks == whole ? 0 : batch, sink);
        } catch (const ChunkError& e) {
            if (decoder.handed_on) return chunks;  // part of it went on: to be read again, whole
            trace.events.resize(events_before);
            stop(off, e.why + " (byte " + std::to_string(e.offset) + " of the chunk's records)", trace.faults);
            break;
        } catch (const OverLimit& e) {
            throw std::runtime_error(name + ": offset " + std::to_string(off + kChunkHeaderBytes + (records - payload) + e.offset) +
                                     ": " + e.why);
        }
        decoded += chunk_events;
        if (kGrowthCharge * trace.events.size() * sizeof(Event) > limits.max_held_bytes)
            throw std::runtime_error(name + ": offset " + std::to_string(off) + ": more than " +
                                     std::to_string(limits.max_held_bytes >> 20) +
                                     " MiB of events (the limit; --max-memory raises it)");
        ++chunks;
        Progress::report(in.offset());
        if (!sink(trace)) return std::nullopt;  // the reader wants no more: no end to check
    }
    if (numbered && decoder.end_events && *decoder.end_events != decoded)
        trace.faults.push_back(name + ": the end record counts " + std::to_string(*decoder.end_events) + " events; the chunks hold " +
                               std::to_string(decoded));
    if (numbered && !decoder.end_events && trace.faults.empty() && at_end)
        trace.warnings.push_back(name + ": no end record after " + std::to_string(chunks) +
                                 " chunks: the writer did not finish (killed, or out of disk); the events up to there are read");
    return std::nullopt;
}

Trace parse_trace(std::string_view bytes, const std::string& name, const ReadLimits& limits) {
    Trace trace;
    // >= 2 bytes an event in practice; unused pages are never touched, but they count as address space.
    trace.events.reserve(std::min<size_t>(bytes.size() / 2, limits.max_held_bytes / sizeof(Event)));
    FixedChunks none({}, 0);
    stream_trace(bytes, none, bytes.size(), name, limits, trace, [](Trace&) { return true; });
    return trace;
}

Trace read_trace(const std::string& path, const ReadLimits& limits) {
    ReadAheadFile file(path, limits.max_decoded_bytes);
    Trace trace;
    trace.events.reserve(std::min<size_t>(file.expected_bytes() / 2, limits.max_held_bytes / sizeof(Event)));
    stream_trace({}, file, file.expected_bytes(), path, limits, trace, [](Trace&) { return true; });
    return trace;
}

}  // namespace vramscope
