#include "analysis/sites.h"

#include "analysis/libraries.h"

#include <algorithm>

#include <array>

namespace vramscope {

bool is_generated_frame(std::string_view file) {
    constexpr std::array<std::string_view, 5> kGenerated = {"/torchinductor_", "/torch_compile_debug/",
                                                            "<eval_with_key>", "<fx_", "/triton/"};
    for (auto marker : kGenerated)
        if (file.find(marker) != std::string_view::npos) return true;
    return false;
}

bool is_internal_frame(std::string_view file) {
    if (is_cpp_file(file) || is_shared_object(file) || file.starts_with("<frozen ") || file.starts_with("<built-in") ||
        is_generated_frame(file))
        return true;
    constexpr std::array<std::string_view, 6> kLibraryDirs = {"/torch/", "/site-packages/", "/dist-packages/",
                                                              "/lib/python3", "/triton/", "/functorch/"};
    for (auto dir : kLibraryDirs)
        if (file.find(dir) != std::string_view::npos) return true;
    return false;
}

FrameRank rank_frame(std::string_view file, std::string_view function) {
    if (!is_internal_frame(file)) return FrameRank::user;
    // The library that called the CUDA driver itself ranks as C++: its Python caller is the site.
    if (!is_cpp_file(file) && !is_shared_object(file)) return FrameRank::library;
    constexpr std::array<std::string_view, 12> kPassThrough = {
        "unwind", "CapturedTraceback", "gather_with_cpp", "CachingAllocator", "c10::cuda::", "c10::Allocator",
        "at::detail::empty", "empty_strided", "wrap_kernel_functor", "at::_ops::", "c10::Dispatcher", "c10::impl::"};
    for (auto marker : kPassThrough)
        if (function.find(marker) != std::string_view::npos) return FrameRank::machinery;
    return FrameRank::cpp;
}

uint32_t SiteResolver::site(uint32_t stack) {
    if (stack == 0) return 0;
    // The table may grow while a trace streams in.
    if (stack >= site_of_.size()) site_of_.resize(std::max<size_t>(table_.stack_count() + 1, stack + 1), kUnresolved);
    uint32_t& cached = site_of_[stack];
    if (cached != kUnresolved) return cached;
    if (rank_of_frame_.size() <= table_.frame_count()) rank_of_frame_.resize(table_.frame_count() + 1, -1);
    SitePick pick;
    for (uint32_t id = stack; id != 0; id = table_.node(id).parent) {
        const uint32_t frame = table_.node(id).frame;
        int8_t& rank = rank_of_frame_[frame];
        if (rank < 0) {
            const Frame& f = table_.frame(frame);
            rank = int8_t(rank_frame(table_.string(f.file), table_.string(f.function)));
        }
        if (pick.see(frame, FrameRank(rank))) break;
    }
    return cached = pick.site;
}

}  // namespace vramscope
