// Who took memory outside torch's caching allocator: the shared object that called the CUDA driver
// (the innermost frame of an external or pinned allocation's stack, events/event.h) by the name
// people know it by. The one rule for it: the findings' `library`, the usage ledger's holders and
// the live monitor's leaks all come from here.
#pragma once
#include <string>
#include <string_view>

#include "events/event.h"
#include "findings/vocabulary.h"
#include "events/validate.h"

namespace vramscope {

// Whose memory an event's block is: torch's allocator's, a library's own device memory, pinned host memory.
inline Memory memory_of(EventKind kind) {
    return is_pinned_event(kind) ? Memory::pinned : is_external_event(kind) ? Memory::external : Memory::torch;
}

// The file of a library frame whose caller could not be unwound.
inline constexpr std::string_view kUnknownLibrary = "<unknown library>";

// A frame of native code named by its shared object (".../libnccl.so.2", "leaky_ext.so"), or
// kUnknownLibrary: it called the driver, and is no site (analysis/sites.h).
bool is_shared_object(std::string_view file);

// "NCCL", "cuBLAS", "cuDNN", "cuFFT", "cuSPARSE", "cuSOLVER", "cuRAND", "CuPy", "JAX/XLA", "Triton",
// "torch", "unknown library", else the file's own name ("leaky_ext.so").
std::string library_name(std::string_view path);

}  // namespace vramscope
