#include "analysis/libraries.h"

#include <array>
#include <utility>

#include "findings/findings.h"

namespace vramscope {
namespace {

std::string_view base_of(std::string_view path) {
    path = name_tail(path);
    const size_t slash = path.rfind('/');
    return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// A folder of the path (not its file) whose name starts with `prefix`: "/x/cupy_backends/cuda/y.so".
bool has_folder_starting(std::string_view path, std::string_view prefix) {
    const size_t file = path.rfind('/');
    for (size_t at = path.find('/'); at != std::string_view::npos && at < file; at = path.find('/', at + 1))
        if (path.substr(at + 1).starts_with(prefix)) return true;
    return false;
}

}  // namespace

bool is_shared_object(std::string_view file) {
    const std::string_view base = base_of(file);
    const size_t so = base.find(".so.");  // a versioned one: libnccl.so.2
    return file == kUnknownLibrary || base.ends_with(".so") ||
           (so != std::string_view::npos && so + 4 < base.size() && base[so + 4] >= '0' && base[so + 4] <= '9');
}

std::string library_name(std::string_view path) {
    if (path == kUnknownLibrary) return "unknown library";
    const std::string_view base = base_of(path);
    // The CUDA libraries by their file, wherever they were installed (a wheel's nvidia/*/lib, the toolkit).
    constexpr std::array<std::pair<std::string_view, std::string_view>, 10> kByFile = {{
        {"libcudart", "CUDA runtime"},  // called itself: through ctypes (capture/calling_library.h)
        {"libcuda.", "CUDA driver"},
        {"libnccl", "NCCL"},
        {"libcublas", "cuBLAS"},  // libcublasLt too
        {"libcudnn", "cuDNN"},
        {"libcufft", "cuFFT"},
        {"libcusparse", "cuSPARSE"},
        {"libcusolver", "cuSOLVER"},
        {"libcurand", "cuRAND"},
        {"libtriton", "Triton"},
    }};
    for (const auto& [prefix, name] : kByFile)
        if (base.starts_with(prefix)) return std::string(name);
    // Frameworks by the package their extension module lives in.
    if (has_folder_starting(path, "cupy")) return "CuPy";  // cupy/, cupy_backends/
    if (has_folder_starting(path, "jaxlib") || has_folder_starting(path, "jax_plugins") ||
        base.starts_with("xla_extension") || base.starts_with("libjax") || base.find("pjrt") != std::string_view::npos)
        return "JAX/XLA";
    if (has_folder_starting(path, "triton") || has_folder_starting(path, ".triton")) return "Triton";
    if (base.starts_with("libc10") || base.starts_with("libtorch")) return "torch";
    return std::string(base);
}

}  // namespace vramscope
