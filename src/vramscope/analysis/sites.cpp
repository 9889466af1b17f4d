#include "analysis/sites.h"

#include <array>

namespace vramscope {

bool is_internal_frame(std::string_view file) {
    if (file.empty() || file == "??" || file.starts_with("<frozen ") || file.starts_with("<built-in"))
        return true;
    constexpr std::array<std::string_view, 5> kCpp = {".cpp", ".cc", ".h", ".hpp", ".cu"};
    for (auto ext : kCpp)
        if (file.ends_with(ext)) return true;
    if (is_generated_frame(file)) return true;
    constexpr std::array<std::string_view, 6> kLibraryDirs = {"/torch/", "/site-packages/", "/dist-packages/",
                                                              "/lib/python3", "/triton/", "/functorch/"};
    for (auto dir : kLibraryDirs)
        if (file.find(dir) != std::string_view::npos) return true;
    return false;
}

bool is_generated_frame(std::string_view file) {
    constexpr std::array<std::string_view, 5> kGenerated = {"/torchinductor_", "/torch_compile_debug/", "<eval_with_key>",
                                                            "<fx_", "/triton/"};
    for (auto marker : kGenerated)
        if (file.find(marker) != std::string_view::npos) return true;
    return false;
}

bool is_capture_machinery(std::string_view file, std::string_view function) {
    if (!file.empty() && file != "??" && !file.ends_with(".cpp") && !file.ends_with(".h") && !file.ends_with(".cc"))
        return false;  // a Python frame
    constexpr std::array<std::string_view, 7> kMachinery = {"unwind", "CapturedTraceback", "CachingAllocator",
                                                            "c10::cuda::", "c10::Allocator", "gather_with_cpp",
                                                            "StackContext"};
    for (auto marker : kMachinery)
        if (function.find(marker) != std::string_view::npos) return true;
    return false;
}

uint32_t SiteResolver::site(uint32_t stack) {
    if (stack == 0) return 0;
    uint32_t& cached = site_of_[stack];
    if (cached != kUnresolved) return cached;
    if (internal_file_.size() <= table_.string_count()) internal_file_.resize(table_.string_count() + 1, -1);
    SitePick pick;
    for (uint32_t id = stack; id != 0; id = table_.node(id).parent) {
        const uint32_t frame = table_.node(id).frame;
        const uint32_t file = table_.frame(frame).file;
        int8_t& internal = internal_file_[file];
        if (internal < 0) internal = is_internal_frame(table_.string(file)) ? 1 : 0;
        if (pick.see(frame, internal)) break;
    }
    return cached = pick.result();
}

}  // namespace vramscope
