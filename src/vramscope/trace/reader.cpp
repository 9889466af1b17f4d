#include "trace/reader.h"

#include <zlib.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "common/file.h"
#include "trace/format.h"
#include "trace/varint.h"

namespace vramscope {
using namespace format;

namespace {

uint32_t get_u32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }

struct ChunkError {
    size_t offset;
    const char* why;
};

// Decodes one chunk's records into the trace. File ids map to table ids through the remap
// vectors, so a hostile file with duplicate definitions cannot point outside the tables.
class ChunkDecoder {
public:
    explicit ChunkDecoder(Trace& t) : t_(t), strings_(1, 0), frames_(1, 0), stacks_(1, 0) {}

    void decode(const uint8_t* begin, const uint8_t* end, size_t file_offset) {
        base_ = begin;
        file_offset_ = file_offset;
        const uint8_t* p = begin;
        uint16_t device = 0;
        uint64_t stream = 0, last_addr = 0;
        int64_t time = 0;
        while (p < end) {
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
                d.device = uint16_t(num(p, end, at));
                d.total_memory = num(p, end, at);
                d.baseline_allocated = num(p, end, at);
                d.baseline_reserved = num(p, end, at);
                t_.device(d.device) = d;
                break;
            }
            case tag_string: strings_.push_back(t_.stacks.intern_string(bytes(p, end, at))); break;
            case tag_frame: {
                Frame f;
                f.file = ref(strings_, num(p, end, at), at);
                f.function = ref(strings_, num(p, end, at), at);
                f.line = uint32_t(num(p, end, at));
                frames_.push_back(t_.stacks.intern_frame(f));
                break;
            }
            case tag_stack: {
                uint32_t parent = ref(stacks_, num(p, end, at), at);
                uint32_t frame = ref(frames_, num(p, end, at), at);
                stacks_.push_back(t_.stacks.intern_stack(parent, frame));
                break;
            }
            case tag_context:
                device = uint16_t(num(p, end, at));
                stream = num(p, end, at);
                break;
            case tag_chunk_time: time = unzigzag(num(p, end, at)); break;
            default: {
                const bool packed = tag & kAligned;
                const uint8_t base = tag & ~kAligned;
                const bool both = base == tag_free_both;
                if (!both && (base < kEventBase || base >= kEventBase + kEventKindCount))
                    throw ChunkError{size_t(at - base_), "unknown record tag"};
                Event e;
                e.kind = both ? EventKind::free_requested : EventKind(base - kEventBase);
                e.device = device;
                e.stream = stream;
                time += unzigzag(num(p, end, at));
                e.time_us = time;
                if (both || is_block_event(e.kind) || is_segment_event(e.kind) || e.kind == EventKind::oom) {
                    const unsigned shift = packed ? kAlignShift : 0;
                    int64_t addr = int64_t(last_addr >> shift) + unzigzag(num(p, end, at));
                    e.addr = uint64_t(addr) << shift;
                    e.size = num(p, end, at) << shift;
                    last_addr = e.addr;
                    if (both) {
                        t_.events.push_back(e);
                        time += int64_t(num(p, end, at));
                        e.kind = EventKind::free_completed;
                        e.time_us = time;
                    } else if (e.kind != EventKind::free_requested && e.kind != EventKind::free_completed) {
                        e.stack = ref(stacks_, num(p, end, at), at);
                    }
                } else {
                    e.name = ref(strings_, num(p, end, at), at);
                }
                t_.events.push_back(e);
            }
            }
        }
    }

private:
    uint64_t num(const uint8_t*& p, const uint8_t* end, const uint8_t* at) {
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
    uint32_t ref(const std::vector<uint32_t>& ids, uint64_t id, const uint8_t* at) {
        if (id >= ids.size()) throw ChunkError{size_t(at - base_), "reference to an undefined id"};
        return ids[id];
    }

    Trace& t_;
    const uint8_t* base_ = nullptr;
    size_t file_offset_ = 0;
    std::vector<uint32_t> strings_, frames_, stacks_;
};

}  // namespace

bool has_vscope_magic(std::string_view bytes) {
    return bytes.size() >= sizeof kMagic && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0;
}

Trace parse_trace(std::string_view bytes, const std::string& name) {
    if (!has_vscope_magic(bytes)) throw std::runtime_error(name + ": offset 0: not a .vscope trace (bad magic)");
    if (bytes.size() < kHeaderBytes) throw std::runtime_error(name + ": offset 8: header cut short");
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    const uint16_t version = uint16_t(data[8] | data[9] << 8);
    if (version != kVersion)
        throw std::runtime_error(name + ": offset 8: trace format version " + std::to_string(version) +
                                 " is not supported (this build reads version " + std::to_string(kVersion) + ")");
    Trace trace;
    trace.source = name;
    trace.format = "vscope";
    ChunkDecoder decoder(trace);
    size_t off = kHeaderBytes, chunks = 0;
    auto stop = [&](size_t at, const std::string& why) {
        trace.warnings.push_back(name + ": offset " + std::to_string(at) + ": " + why + "; read " +
                                 std::to_string(chunks) + " whole chunks (" + std::to_string(trace.events.size()) +
                                 " events) and ignored the remaining " + std::to_string(bytes.size() - at) + " bytes");
    };
    while (off < bytes.size()) {
        if (bytes.size() - off < kChunkHeaderBytes) {
            stop(off, "file cut inside a chunk header");
            break;
        }
        const uint8_t* h = data + off;
        const uint32_t len = get_u32(h + 4), crc = get_u32(h + 8);
        if (get_u32(h) != kChunkMagic) {
            stop(off, "bad chunk magic");
            break;
        }
        if (len > kMaxChunkPayload || len > bytes.size() - off - kChunkHeaderBytes) {
            stop(off, len > kMaxChunkPayload ? "chunk length out of range" : "file cut inside a chunk");
            break;
        }
        const uint8_t* payload = h + kChunkHeaderBytes;
        if (uint32_t(crc32(0, payload, len)) != crc) {
            stop(off, "chunk checksum mismatch");
            break;
        }
        // A chunk that passed its checksum but does not decode came from a broken writer: keep
        // what came before it rather than half of it.
        const size_t events_before = trace.events.size();
        try {
            decoder.decode(payload, payload + len, off + kChunkHeaderBytes);
        } catch (const ChunkError& e) {
            trace.events.resize(events_before);
            stop(off + kChunkHeaderBytes + e.offset, e.why);
            break;
        }
        off += kChunkHeaderBytes + len;
        ++chunks;
    }
    return trace;
}

Trace read_trace(const std::string& path) {
    const Bytes bytes = read_file(path);
    return parse_trace(view(bytes), path);
}

}  // namespace vramscope
