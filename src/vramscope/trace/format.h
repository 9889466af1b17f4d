// The .vscope trace format, all of it (docs/trace-format.md explains the why).
//
//   file   := header chunk*
//   header := "\x89VSCOPE\n" u16 version u16 reserved            (12 bytes, little endian)
//   chunk  := "VSCK" u32 payload_bytes u32 crc32(payload) payload (a cut chunk is dropped whole)
//   payload:= record*
//   record := tag(u8) fields(varints)
//
// Records define strings, frames and stacks before first use, so a chunk depends only on the
// chunks before it. Event times, addresses and the current device/stream are deltas from the
// previous event *in the same chunk* (reset at each chunk), so a chunk decodes on its own state.
#pragma once
#include <cstdint>

namespace vramscope::format {

inline constexpr char kMagic[8] = {'\x89', 'V', 'S', 'C', 'O', 'P', 'E', '\n'};
inline constexpr uint16_t kVersion = 1;
inline constexpr uint32_t kChunkMagic = 0x4B435356;  // "VSCK" read as little-endian u32
inline constexpr size_t kHeaderBytes = 12;
inline constexpr size_t kChunkHeaderBytes = 12;
inline constexpr uint32_t kMaxChunkPayload = 1u << 24;  // a reader refuses larger: it is corrupt

enum Tag : uint8_t {
    // definitions (ids are implicit: 1, 2, ... in order of appearance, per table)
    tag_meta = 0x01,      // key_len key value_len value
    tag_device = 0x02,    // device total_memory baseline_allocated baseline_reserved
    tag_string = 0x03,    // len bytes
    tag_frame = 0x04,     // file_string function_string line
    tag_stack = 0x05,     // parent_stack frame
    tag_context = 0x06,   // device stream: the device/stream of the events that follow
    tag_chunk_time = 0x07,// absolute time_us (zigzag) the next event's delta counts from
    // events: tag = kEventBase + EventKind, then: dt_us; then by kind (see writer.cpp)
    kEventBase = 0x20,
    // One record for free_requested + free_completed at the same instant: the common case.
    tag_free_both = 0x40,
};

// Flag bits or'ed into an event tag: the address and the size are multiples of 512
// (the caching allocator's rounding), stored shifted to save a byte each.
inline constexpr uint8_t kAligned = 0x80;
inline constexpr unsigned kAlignShift = 9;

}  // namespace vramscope::format
