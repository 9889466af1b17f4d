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

FrameRank rank_file(std::string_view file) {
    if (!is_internal_frame(file)) return FrameRank::user;
    // The library that called the CUDA driver itself ranks as C++: its Python caller is the site.
    return is_cpp_file(file) || is_shared_object(file) ? FrameRank::cpp : FrameRank::library;
}

FrameRank rank_frame(FrameRank file_rank, std::string_view function) {
    if (file_rank != FrameRank::cpp) return file_rank;
    constexpr std::array<std::string_view, 12> kPassThrough = {
        "unwind", "CapturedTraceback", "gather_with_cpp", "CachingAllocator", "c10::cuda::", "c10::Allocator",
        "at::detail::empty", "empty_strided", "wrap_kernel_functor", "at::_ops::", "c10::Dispatcher", "c10::impl::"};
    for (auto marker : kPassThrough)
        if (function.find(marker) != std::string_view::npos) return FrameRank::machinery;
    return FrameRank::cpp;
}

FrameRank rank_frame(std::string_view file, std::string_view function) { return rank_frame(rank_file(file), function); }

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
            // Frames differ by line, files repeat: each file's path is looked at once, however long.
            if (rank_of_file_.size() <= f.file) rank_of_file_.resize(table_.string_count() + 1, -1);
            int8_t& file_rank = rank_of_file_[f.file];
            if (file_rank < 0) file_rank = int8_t(rank_file(table_.string(f.file)));
            rank = int8_t(rank_frame(FrameRank(file_rank), table_.string(f.function)));
        }
        if (pick.see(frame, FrameRank(rank))) break;
    }
    return cached = pick.site;
}

SourceLine source_line(const StackTable& table, uint32_t frame) {
    if (frame == 0) return SourceLine{kNoPythonFrame, 0, ""};
    const Frame& f = table.frame(frame);
    return SourceLine{std::string(table.string(f.file)), f.line, std::string(table.string(f.function))};
}

std::vector<SourceLine> stack_lines(const StackTable& table, uint32_t stack) {
    std::vector<SourceLine> out;
    for (uint32_t f : table.frames_of(stack)) out.push_back(source_line(table, f));
    return out;
}

// Leading frames to skip when a stack is shown: the C++ frames (unwinder, allocator, dispatcher)
// that torch's stacks="all" puts before the first Python frame, and a dispatch mode's own frames
// with the wrappers torch calls it through (a live-tensor capture records from inside one): shown
// from the op's caller. A stack of machinery alone shows whole.
size_t machinery_frames(const std::vector<SourceLine>& stack) {
    size_t first = 0;
    while (first < stack.size() && is_cpp_file(stack[first].file)) ++first;
    for (size_t i = first; i < stack.size() && i < first + 4; ++i) {
        if (stack[i].function != "__torch_dispatch__") continue;
        const auto wrapper = [](const std::string& file) {
            return file.ends_with("/torch/_dynamo/eval_frame.py") || file.ends_with("/torch/_compile.py");
        };
        for (first = i + 1; first < stack.size() && wrapper(stack[first].file);) ++first;
        break;
    }
    return first < stack.size() ? first : 0;
}

std::optional<SourceLine> library_frame(const std::vector<SourceLine>& stack, size_t shown_from, const SourceLine& site) {
    for (size_t i = shown_from; i < stack.size(); ++i) {
        const SourceLine& f = stack[i];
        if (is_cpp_file(f.file) || is_shared_object(f.file) || f.file.find("-packages/torch/") != std::string::npos) continue;
        if (f.file == site.file && f.line == site.line && f.function == site.function) return std::nullopt;
        // An installed package's (the standard library's wrappers say nothing of who allocates).
        return f.file.find("-packages/") != std::string::npos ? std::optional<SourceLine>(f) : std::nullopt;
    }
    return std::nullopt;
}

}  // namespace vramscope
