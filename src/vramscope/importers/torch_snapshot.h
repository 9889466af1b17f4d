// Imports PyTorch's memory snapshot (torch.cuda.memory._dump_snapshot: a pickle, plain or gzip)
// into a Trace, through the data-only pickle reader.
#pragma once
#include <string>
#include <string_view>

#include "events/trace.h"

namespace vramscope {

bool looks_like_pickle(std::string_view bytes);

// Throws std::runtime_error("NAME: offset N: why") on a file that is not a usable snapshot.
Trace import_torch_snapshot(std::string_view pickle_bytes, const std::string& name);

// Reads any supported input by its content: .vscope, pickle, gzip'd pickle.
Trace load_any(const std::string& path);

}  // namespace vramscope
