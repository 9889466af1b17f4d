// Imports PyTorch's memory snapshot (torch.cuda.memory._dump_snapshot: a pickle, plain or gzip)
// into a Trace, through the data-only pickle reader.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/chunk_source.h"
#include "common/limits.h"
#include "events/trace.h"

namespace vramscope {

bool looks_like_pickle(std::string_view bytes);

// How trace entries are read: `direct`, straight from the bytes once a list's first batch is
// taken (the fastest); `streamed`, each batch as Document values the importer takes and the
// parser then lets go; `whole_document`, the whole pickle as one Document first (what the other
// two fall back to, and what tests hold them to). All three give the same Trace.
enum class ImportPath { direct, streamed, whole_document };

// Throws std::runtime_error("NAME: offset N: why") on a file that is not a usable snapshot.
Trace import_torch_snapshot(std::string_view pickle_bytes, const std::string& name, const ReadLimits& limits = {},
                            ImportPath path = ImportPath::direct);
// The same from a pickle that arrives in chunks: `open` gives it from its start (a second time
// for the rare pickle that must be read whole, see pickle::NeedsWholeDocument).
Trace import_torch_snapshot(const std::function<std::unique_ptr<ChunkSource>()>& open, const std::string& name,
                            size_t size_hint, const ReadLimits& limits = {}, ImportPath path = ImportPath::direct);

// Reads any supported input by its content: .vscope, pickle, gzip'd pickle (or .vscope); then
// validate_events() says whether its content can be judged (Trace::faults).
Trace load_any(const std::string& path, const ReadLimits& limits = {});
// The same for bytes already in memory (`name` is for messages).
Trace load_bytes(std::string_view bytes, const std::string& name, const ReadLimits& limits = {});

}  // namespace vramscope
