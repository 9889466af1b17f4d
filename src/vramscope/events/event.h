// The event vocabulary every part of vramscope speaks: capture and importers produce these,
// the trace format stores them, analysis replays them.
#pragma once
#include <cstdint>
#include <string_view>

namespace vramscope {

enum class EventKind : uint8_t {
    alloc = 0,            // a block handed to a tensor
    free_requested = 1,   // the tensor let go; the block may still wait on other streams
    free_completed = 2,   // the block is back in the allocator's cache
    segment_alloc = 3,    // cudaMalloc of a segment (reserved grows)
    segment_free = 4,     // cudaFree of a segment (reserved shrinks)
    segment_map = 5,      // expandable segment grew
    segment_unmap = 6,    // expandable segment shrank
    oom = 7,              // the allocator ran out; size = bytes asked, addr = bytes free on the device
    step = 8,             // end of one training step (our own marker)
    microbatch = 9,       // end of one backward inside a step
    annotation_start = 10,// a named region opens (torch record_function, user mark)
    annotation_end = 11,  // a named region closes
    snapshot = 12,        // the recorder took a memory snapshot here
    free = 13,            // free_requested and free_completed at one instant: the usual case, one event
    // Memory that never passes through torch's caching allocator, as the CUDA driver handed it out
    // (capture/driver_calls.h). Allocations carry the Python stack with the library that called the
    // driver as its innermost frame (file: the library's path, function: the driver call).
    external_alloc = 14,  // device memory a library took itself (NCCL, CuPy, JAX, an extension)
    external_free = 15,   // given back; size as allocated
    pinned_alloc = 16,    // page-locked host memory (torch's host allocator, NCCL, any library);
                          // device: the context's that allocated it
    pinned_free = 17,     // given back; size as allocated
    device_usage = 18,    // what NVML says the process uses on the device: size = bytes (addr 0)
    // A library's own pool as the library counts it (JAX's memory_stats(), CuPy's default pool),
    // read at a step end: size = bytes in use (its live arrays), addr = the pool's bytes (taken
    // from the driver), name = the library as analysis/libraries.h spells it ("JAX/XLA", "CuPy").
    // A pool that sub-allocates hides its arrays from the driver's calls; this is what it holds.
    pool_usage = 19,
};
constexpr int kEventKindCount = 20;

// torch's snapshot `action` spelling to a kind; false if unknown.
bool parse_event_kind(std::string_view name, EventKind& out);
// And back (our own spelling for the kinds torch has no action for).
std::string_view event_kind_name(EventKind kind);

constexpr bool is_block_event(EventKind k) { return k <= EventKind::free_completed || k == EventKind::free; }
// The block is back with the allocator.
constexpr bool is_release(EventKind k) { return k == EventKind::free_completed || k == EventKind::free; }
constexpr bool is_segment_event(EventKind k) {
    return k >= EventKind::segment_alloc && k <= EventKind::segment_unmap;
}
// Memory outside torch's caching allocator, on the device or pinned on the host.
constexpr bool is_external_event(EventKind k) { return k >= EventKind::external_alloc && k <= EventKind::pinned_free; }
constexpr bool is_external_alloc(EventKind k) { return k == EventKind::external_alloc || k == EventKind::pinned_alloc; }
// What the allocator or the driver did with memory (not a marker, an OOM or a reading): step ends
// before the first of these are forgotten, by the analysis and the live monitor alike (a ring
// buffer that wrapped keeps markers of steps whose memory it lost).
constexpr bool is_memory_event(EventKind k) { return is_block_event(k) || is_segment_event(k) || is_external_event(k); }
// Kinds with an address and size (for oom: bytes free on the device, and bytes asked; for
// device_usage: the bytes only).
constexpr bool carries_address(EventKind k) {
    return k <= EventKind::oom || k == EventKind::free || is_external_event(k) || k == EventKind::device_usage;
}
// A reading with a name (pool_usage) rather than an address: it carries its bytes in addr and size.
constexpr bool is_pool_reading(EventKind k) { return k == EventKind::pool_usage; }
// Kinds recorded with the stack that caused them; frees are identified by their alloc instead.
constexpr bool has_stack(EventKind k) {
    return (k <= EventKind::oom && k != EventKind::free_requested && !is_release(k)) || is_external_alloc(k);
}

// One thing that happened, in 32 bytes (a run holds tens of millions). addr/size are bytes;
// stack is an id in the trace's StackTable, name (for markers and annotations, which have no
// stack, and a pool reading's library) an id in its string table; 0 means none. stream indexes Trace::streams.
struct Event {
    uint64_t addr = 0;
    uint64_t size = 0;
    int64_t time_us = 0;
    union {
        uint32_t stack = 0;
        uint32_t name;
    };
    uint16_t stream = 0;
    uint8_t device = 0;
    EventKind kind = EventKind::alloc;
};
static_assert(sizeof(Event) == 32);

// `completion` ends the wait that `request` began: the same block, device and stream, not earlier.
// At the same instant the two are one `free` (the trace writer, the recorder and the snapshot
// importer all fold them by this rule).
inline bool completes(const Event& request, const Event& completion) {
    return request.kind == EventKind::free_requested && completion.kind == EventKind::free_completed &&
           completion.addr == request.addr && completion.size == request.size && completion.device == request.device &&
           completion.stream == request.stream && completion.time_us >= request.time_us;
}

}  // namespace vramscope
