// Who called the CUDA driver: the shared object on the calling thread's native stack that asked for
// the memory (libnccl.so.2, CuPy's runtime module, an extension's .so), found by unwinding from
// inside the driver call and skipping what merely carries the call: vramscope's own module, CUPTI,
// the driver and the CUDA runtime. A call from Python through ctypes (libffi's trampoline, _ctypes)
// has no library of its own: the CUDA library it called (the runtime, the driver) is named, and the
// Python line that called it is the site. The path is what the trace records; naming its holder
// ("NCCL") is the analysis' (analysis/libraries.h).
#pragma once
#include <string>
#include <string_view>

namespace vramscope::capture {

inline constexpr std::string_view kUnknownLibrary = "<unknown library>";

struct CallingLibrary {
    std::string path;    // absolute, as the loader has it; kUnknownLibrary when unwinding failed
    bool torch = false;  // libc10_cuda, libtorch_cuda, libtorch: torch's allocators
};

// From the calling thread, now. Safe in any thread; takes the loader's lock (dladdr), so it is for
// rare calls only.
CallingLibrary calling_library();

// Whether a library only carries a driver call for its caller (CUPTI, the driver, the runtime).
bool carries_driver_calls(std::string_view path);
// Whether a library is torch's own (its allocators' memory is recorded by the allocator hook).
bool is_torch_library(std::string_view path);

}  // namespace vramscope::capture
