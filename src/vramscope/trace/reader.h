// Reads a .vscope file. A file cut anywhere (SIGKILL, full disk) reads back up to its last whole
// chunk, with a warning in Trace::warnings naming the file and the byte offset. Damage that is
// not a cut (a bad checksum, a chunk repeated, swapped or missing, an event count that differs
// from the end record's) keeps the chunks before it too, but goes to Trace::faults.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/chunk_source.h"
#include "common/limits.h"
#include "events/trace.h"

namespace vramscope {

bool has_vscope_magic(std::string_view bytes);

// Called after each chunk with its events appended to Trace::events (and the tables grown): it
// may take them and clear the vector, so a trace of any length streams through in one chunk's
// memory. Returns false to stop reading (then no end record is checked).
using ChunkSink = std::function<bool(Trace&)>;
// Reads `first`, then what `rest` gives; total_bytes is for messages ("ignored the remaining N").
// With `batch` > 0 the sink is also called every `batch` events inside a chunk (its answer counts
// only at the chunk's end) and must take them: they are read back while still in cache, not from
// a chunk's megabytes of events. A chunk that then fails to decode has handed on part of itself,
// which a chunk that fails must never do: its number comes back, and the caller reads the input
// again from the start with `whole` = that number (its events then held until it fails again).
// nullopt otherwise.
std::optional<size_t> stream_trace(std::string_view first, ChunkSource& rest, uint64_t total_bytes, const std::string& name,
                                   const ReadLimits& limits, Trace& trace, const ChunkSink& sink, size_t batch = 0,
                                   size_t whole = SIZE_MAX);

// Throws std::runtime_error ("FILE: offset N: why") only when not even the header is valid.
Trace read_trace(const std::string& path, const ReadLimits& limits = {});
Trace parse_trace(std::string_view bytes, const std::string& name, const ReadLimits& limits = {});

}  // namespace vramscope
