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
    uint64_t size = 0;
    uint64_t stream = 0;
    uint32_t stack = 0;
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
    uint64_t final_reserved = 0;                // sum of those segments' sizes
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
