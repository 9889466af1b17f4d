#include "capture/calling_library.h"

#include <dlfcn.h>
#include <unwind.h>

#include <cstdint>

namespace vramscope::capture {
namespace {

std::string_view file_name(std::string_view path) {
    const size_t slash = path.rfind('/');
    return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool starts_with_any(std::string_view name, std::initializer_list<std::string_view> prefixes) {
    for (std::string_view p : prefixes)
        if (name.starts_with(p)) return true;
    return false;
}

// The module this code is in (the Python module, or a test binary): its frames are ours.
const void* own_module() {
    static const void* base = [] {
        Dl_info info{};
        return dladdr(reinterpret_cast<const void*>(&own_module), &info) ? info.dli_fbase : nullptr;
    }();
    return base;
}

struct Search {
    CallingLibrary found;
    bool done = false;
    int frames = 0;
    std::string called;  // the outermost CUDA library the call came through (the runtime, the driver)
};

// ctypes' own and libffi's trampoline: a call from Python through ctypes. The caller is the Python
// line (its stack says which); the library is the one it called, the CUDA runtime or the driver.
bool is_ctypes_trampoline(std::string_view path) {
    return starts_with_any(file_name(path), {"libffi.so", "_ctypes."});
}
constexpr int kMaxFrames = 64;  // a driver call sits a handful of frames below its caller

_Unwind_Reason_Code visit(_Unwind_Context* context, void* arg) {
    auto& s = *static_cast<Search*>(arg);
    if (++s.frames > kMaxFrames) return _URC_END_OF_STACK;
    const uintptr_t ip = _Unwind_GetIP(context);
    if (!ip) return _URC_END_OF_STACK;
    Dl_info info{};
    // ip is the return address: one byte back is inside the call, in the caller's object.
    if (!dladdr(reinterpret_cast<const void*>(ip - 1), &info) || !info.dli_fname) {
        s.done = true;  // code no loader knows (generated at run time): no library to name
        return _URC_END_OF_STACK;
    }
    if (info.dli_fbase == own_module()) return _URC_NO_REASON;
    if (carries_driver_calls(info.dli_fname)) {
        if (!file_name(info.dli_fname).starts_with("libcupti.so")) s.called = info.dli_fname;
        return _URC_NO_REASON;
    }
    if (is_ctypes_trampoline(info.dli_fname) && !s.called.empty()) {
        s.found.path = s.called;
        s.done = true;
        return _URC_END_OF_STACK;
    }
    s.found.path = info.dli_fname;
    s.found.torch = is_torch_library(info.dli_fname);
    s.done = true;
    return _URC_END_OF_STACK;
}

}  // namespace

bool carries_driver_calls(std::string_view path) {
    return starts_with_any(file_name(path), {"libcupti.so", "libcuda.so", "libcudart.so"});
}

bool is_torch_library(std::string_view path) {
    return starts_with_any(file_name(path), {"libc10_cuda.so", "libtorch_cuda.so", "libtorch.so"});
}

CallingLibrary calling_library() {
    Search s;
    _Unwind_Backtrace(visit, &s);
    if (s.found.path.empty()) s.found.path = kUnknownLibrary;
    return s.found;
}

}  // namespace vramscope::capture
