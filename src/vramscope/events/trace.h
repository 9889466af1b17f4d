// A whole recording in memory: what the importers build, the trace file stores and analysis reads.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/limits.h"
#include "events/event.h"
#include "events/stack_table.h"

namespace vramscope {

struct DeviceInfo {
    uint16_t device = 0;
    uint64_t total_memory = 0;        // capacity in bytes; 0 when unknown
    uint64_t baseline_allocated = 0;  // allocated bytes before the first event
    uint64_t baseline_reserved = 0;   // reserved bytes before the first event
};

// A block live when a snapshot was taken: what a snapshot without trace history still shows.
struct LiveBlock {
    uint16_t device = 0;
    uint64_t addr = 0;
    uint64_t size = 0;            // the block's, as the allocator rounded it
    uint64_t requested_size = 0;  // what was asked for
    uint64_t stream = 0;
    uint32_t stack = 0;
    bool pending_free = false;    // freed by the program, waiting on another stream
};

// A segment of torch's allocator when a snapshot was taken (its blocks are LiveBlocks).
struct LiveSegment {
    uint16_t device = 0;
    uint64_t addr = 0;
    uint64_t size = 0;
    uint64_t stream = 0;
    bool expandable = false;
};

// A value of the snapshot kept as it was read, for the memory_viz export (allocator_settings):
// none, a bool, an integer, a float, a string, a list, or a dict of named items.
struct SnapshotValue {
    enum class Kind : uint8_t { none, boolean, integer, floating, string, list, dict } kind = Kind::none;
    int64_t integer = 0;  // boolean and integer
    double floating = 0;
    std::string string;
    std::vector<std::pair<std::string, SnapshotValue>> items;  // a list's keys are empty
};

struct Trace {
    std::string source;                         // the file it came from
    std::string format;                         // "vscope" or "torch-snapshot"
    std::map<std::string, std::string> meta;    // torch version, command, rank, ...
    std::vector<DeviceInfo> devices;
    StackTable stacks;
    std::vector<Event> events;                    // in time order
    std::vector<uint64_t> streams{0};           // Event::stream -> the CUDA stream handle (0: default)
    std::vector<LiveBlock> final_blocks;        // from a snapshot's segments, when imported
    std::vector<LiveSegment> final_segments;    // those segments
    uint64_t final_reserved = 0;                // sum of those segments' sizes
    SnapshotValue allocator_settings;           // a snapshot's, as read (none for a .vscope)
    std::vector<std::string> warnings;          // what reading it noticed but survived
    // Why its content cannot be trusted (wrong types, missing or reversed times, impossible sizes,
    // no memory events, damaged chunks): analysis then gives no verdict but says these.
    std::vector<std::string> faults;
    // What reading it was allowed to hold: analysis and exports hold what they derive from it
    // (timelines, counters) to the same --max-memory.
    ReadLimits limits;

    DeviceInfo& device(uint16_t id);
    uint16_t stream_index(uint64_t handle);  // adds the stream on first use
    // Events as torch's recorder counts them: a `free` is its two entries, requested and completed.
    size_t entry_count() const;
};

}  // namespace vramscope
