// The .vscope trace format, all of it (docs/trace-format.md explains the why).
//
//   file   := header chunk* end_chunk
//   header := "\x89VSCOPE\n" u16 version u16 reserved            (12 bytes, little endian)
//   chunk  := "VSCK" u32 payload_bytes u32 crc32(payload) payload (a cut chunk is dropped whole)
//   payload:= chunk_seq record*                                  (version 1: record* only)
//   end_chunk := a chunk whose records are one end record       (version 2)
//   record := tag(u8) fields(varints)
//
// Records define strings, frames and stacks before first use, so a chunk depends only on the
// chunks before it. Event times, addresses and the current device/stream are deltas from the
// previous event *in the same chunk* (addresses: of the same device and stream), reset at each
// chunk, so a chunk decodes with only the tables of the chunks before it.
#pragma once
#include <cstdint>

namespace vramscope::format {

inline constexpr char kMagic[8] = {'\x89', 'V', 'S', 'C', 'O', 'P', 'E', '\n'};
inline constexpr uint16_t kVersion = 4;  // 3: the events of memory outside torch's allocator; 4: pool readings
inline constexpr uint16_t kOldestVersion = 1;  // no chunk numbers, no end record: read, with a note
inline constexpr uint32_t kChunkMagic = 0x4B435356;  // "VSCK" read as little-endian u32
inline constexpr size_t kHeaderBytes = 12;
inline constexpr size_t kChunkHeaderBytes = 12;
inline constexpr uint32_t kMaxChunkPayload = 1u << 24;  // a reader refuses larger: it is corrupt

// A record's first byte: the low 5 bits say what it is, the top 3 are flags (events only).
enum Tag : uint8_t {
    // 0..13: an event of that EventKind (13: free, requested and completed at one instant)
    tag_free_pair_later = 14,  // free_requested, then free_completed later (other streams): + µs to it
    tag_unaligned = 15,        // escape: the real tag follows; address and size are stored unshifted
    // definitions (ids are implicit: 1, 2, ... in order of appearance, per table)
    tag_meta = 16,        // key_len key value_len value
    tag_device = 17,      // device total_memory baseline_allocated baseline_reserved
    tag_string = 18,      // shared prefix length << 3 | which of the last 8 strings, then len bytes of the rest
    tag_frame = 19,       // file_string function_string line
    tag_stack = 20,       // parent_stack frame
    tag_context = 21,     // index into the file's (device, stream) list; a new index is followed by
                          // device and stream. Applies to the events that follow in the chunk.
    tag_chunk_time = 22,  // zigzag absolute time_us the next event's delta counts from
    tag_alloc_reused = 23,// an alloc at the predicted address (the block just freed with its size)
    tag_chunk_seq = 24,   // a chunk's first record (version 2): its number, 0, 1, 2, ...
    tag_end = 25,         // the writer finished: the number of events in the file (version 2)
    // 26..30: an event of kind 14..18 (memory outside torch's allocator, NVML's figure: version 3)
    // 31: kind 19, a library pool's reading (version 4): Δtime, library string, pool bytes, bytes in use
    tag_later_kinds = 26,
};
inline constexpr uint8_t kFirstLaterKind = 14;
inline constexpr uint8_t kLaterKinds = 6;  // 14..19: events/event.h holds them to it
inline constexpr uint8_t kVersion3Kinds = 5;  // 14..18: a version-3 file knows no other
// An event kind's tag, and back (tags 14 and 15 were taken when kinds grew past 13).
inline constexpr uint8_t tag_of_kind(uint8_t kind) {
    return kind < kFirstLaterKind ? kind : uint8_t(tag_later_kinds + (kind - kFirstLaterKind));
}
inline constexpr int kind_of_tag(uint8_t type) {  // -1: not an event's tag
    return type < kFirstLaterKind                                           ? type
           : type >= tag_later_kinds && type < tag_later_kinds + kLaterKinds ? kFirstLaterKind + (type - tag_later_kinds)
                                                                             : -1;
}
inline constexpr uint8_t kTypeMask = 0x1f;

// Event flags (predict.h makes the guesses).
inline constexpr uint8_t kGuessed = 0x80;   // alloc/segment/oom: stack is the predicted one;
                                            // frees: address is a recent alloc's, stored as its index
inline constexpr uint8_t kSizeKnown = 0x40; // size not stored: it is the predicted one
inline constexpr uint8_t kSameTime = 0x20;  // time delta not stored: 0

// Addresses and sizes are multiples of 512 (the caching allocator's rounding) unless escaped
// with tag_unaligned, and are stored shifted right by 9.
inline constexpr unsigned kAlignShift = 9;

}  // namespace vramscope::format
