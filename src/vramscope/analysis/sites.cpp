#include "analysis/sites.h"

#include "analysis/libraries.h"

#include <algorithm>

#include <array>

namespace vramscope {

bool is_generated_frame(std::string_view file) {
    file = name_tail(file);
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
        if (name_tail(file).find(dir) != std::string_view::npos) return true;
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
        if (name_tail(function).find(marker) != std::string_view::npos) return FrameRank::machinery;
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
        const std::string& f = stack[i].function;  // `StorageEvents.__torch_dispatch__` as a capture names it
        if (!(f == "__torch_dispatch__" || f.ends_with(".__torch_dispatch__"))) continue;
        const auto wrapper = [](const std::string& file) {
            return file.ends_with("/torch/_dynamo/eval_frame.py") || file.ends_with("/torch/_compile.py");
        };
        for (first = i + 1; first < stack.size() && wrapper(stack[first].file);) ++first;
        break;
    }
    return first < stack.size() ? first : 0;
}

bool passes_through(std::string_view file) {
    if (is_cpp_file(file) || is_shared_object(file)) return true;
    file = name_tail(file);
    // vramscope's own: the live-tensor source records from inside its dispatch mode.
    if (file.find("-packages/torch/") != std::string_view::npos || file.find("-packages/vramscope/") != std::string_view::npos)
        return true;
    const bool installed = file.find("-packages/") != std::string_view::npos;
    return !installed && (file.find("/lib/python3") != std::string_view::npos || file.starts_with("<frozen "));
}

LibraryFrameKind library_frame_kind(std::string_view file) {
    if (passes_through(file)) return LibraryFrameKind::passes_through;
    return name_tail(file).find("-packages/") != std::string_view::npos ? LibraryFrameKind::installed : LibraryFrameKind::other;
}

std::optional<SourceLine> library_frame(const std::vector<SourceLine>& stack, size_t shown_from, const SourceLine& site) {
    for (size_t i = shown_from; i < stack.size(); ++i) {
        const SourceLine& f = stack[i];
        const LibraryFrameKind kind = library_frame_kind(f.file);
        if (kind == LibraryFrameKind::passes_through) continue;
        if (f.file == site.file && f.line == site.line && f.function == site.function) return std::nullopt;
        return kind == LibraryFrameKind::installed ? std::optional<SourceLine>(f) : std::nullopt;
    }
    return std::nullopt;
}

SiteKey SiteResolver::key(uint32_t stack) {
    SiteKey k{site(stack), 0};
    if (k.site == 0 || rank_of_frame_[k.site] != int8_t(FrameRank::user)) return k;
    if (stack >= via_of_.size()) via_of_.resize(std::max<size_t>(table_.stack_count() + 1, stack + 1), kUnresolved);
    uint32_t& via = via_of_[stack];
    if (via == kUnresolved) {
        via = 0;
        for (uint32_t id = stack; id != 0; id = table_.node(id).parent) {
            const uint32_t frame = table_.node(id).frame;
            const Frame& f = table_.frame(frame);
            if (kind_of_file_.size() <= f.file) kind_of_file_.resize(table_.string_count() + 1, -1);
            int8_t& kind = kind_of_file_[f.file];  // each file's path looked at once, as rank_of_file_
            if (kind < 0) kind = int8_t(library_frame_kind(table_.string(f.file)));
            if (LibraryFrameKind(kind) == LibraryFrameKind::passes_through) continue;
            if (frame != k.site && LibraryFrameKind(kind) == LibraryFrameKind::installed)
                via = function_frame_.try_emplace(uint64_t(f.file) << 32 | f.function, frame).first->second;
            break;
        }
    }
    k.via = via;
    return k;
}

namespace {
// One frame of module_of's walk: true when it decides (a module outside torch).
bool module_frame(std::string_view file, std::string_view function, std::string& module, std::string& torch_module) {
    constexpr std::string_view kForward = ".forward";
    file = name_tail(file);
    const bool torch_own = file.find("-packages/torch/") != std::string_view::npos;
    if (torch_own && file.find("-packages/torch/nn/") == std::string_view::npos) return false;  // autograd Functions, compiled wrappers
    std::string found;
    if (function.ends_with(kForward)) {
        const std::string_view cls = function.substr(0, function.size() - kForward.size());
        found = std::string(cls.substr(cls.rfind('.') + 1));  // `main.<locals>.Net` is Net
    } else if (function == "forward") {
        found = "forward in " + std::string(file.substr(file.rfind('/') + 1));
    }
    if (found.empty()) return false;
    if (!torch_own) return module = std::move(found), true;
    if (torch_module.empty()) torch_module = std::move(found);
    return false;
}
}  // namespace

std::string module_of(const StackTable& table, uint32_t stack) {
    std::string module, torch_module;
    for (uint32_t id = stack; id != 0; id = table.node(id).parent) {
        const Frame& f = table.frame(table.node(id).frame);
        if (module_frame(table.string(f.file), table.string(f.function), module, torch_module)) return module;
    }
    return torch_module;
}

}  // namespace vramscope
