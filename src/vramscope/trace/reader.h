// Reads a .vscope file. A file cut anywhere (SIGKILL, full disk) reads back up to its last whole
// chunk, with a warning in Trace::warnings naming the file and the byte offset. Damage that is
// not a cut (a bad checksum, a chunk repeated, swapped or missing, an event count that differs
// from the end record's) keeps the chunks before it too, but goes to Trace::faults.
#pragma once
#include <functional>
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
void stream_trace(std::string_view first, ChunkSource& rest, uint64_t total_bytes, const std::string& name,
                  const ReadLimits& limits, Trace& trace, const ChunkSink& sink);

// Throws std::runtime_error ("FILE: offset N: why") only when not even the header is valid.
Trace read_trace(const std::string& path, const ReadLimits& limits = {});
Trace parse_trace(std::string_view bytes, const std::string& name, const ReadLimits& limits = {});

}  // namespace vramscope
