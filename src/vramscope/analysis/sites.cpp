#include "analysis/sites.h"

#include "analysis/libraries.h"
#include "common/format.h"

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

bool passes_through(std::string_view file) {
    if (is_cpp_file(file) || is_shared_object(file) || file.find("-packages/torch/") != std::string_view::npos) return true;
    const bool installed = file.find("-packages/") != std::string_view::npos;
    return !installed && (file.find("/lib/python3") != std::string_view::npos || file.starts_with("<frozen "));
}

namespace {
bool installed_package(std::string_view file) { return file.find("-packages/") != std::string_view::npos; }
}  // namespace

std::optional<SourceLine> library_frame(const std::vector<SourceLine>& stack, size_t shown_from, const SourceLine& site) {
    for (size_t i = shown_from; i < stack.size(); ++i) {
        const SourceLine& f = stack[i];
        if (passes_through(f.file)) continue;
        if (f.file == site.file && f.line == site.line && f.function == site.function) return std::nullopt;
        return installed_package(f.file) ? std::optional<SourceLine>(f) : std::nullopt;
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
            const std::string_view file = table_.string(f.file);
            if (passes_through(file)) continue;
            if (frame != k.site && installed_package(file))
                via = function_frame_.try_emplace(uint64_t(f.file) << 32 | f.function, frame).first->second;
            break;
        }
    }
    k.via = via;
    return k;
}

std::string module_of(const std::vector<SourceLine>& stack) {
    constexpr std::string_view kForward = ".forward";
    std::string torch_module;
    for (const SourceLine& f : stack) {
        const bool torch_own = f.file.find("/torch/") != std::string::npos;
        if (torch_own && f.file.find("/torch/nn/") == std::string::npos) continue;  // autograd Functions, compiled wrappers
        std::string module;
        if (f.function.ends_with(kForward)) {
            const std::string_view cls = std::string_view(f.function).substr(0, f.function.size() - kForward.size());
            module = std::string(cls.substr(cls.rfind('.') + 1));  // `main.<locals>.Net` is Net
        } else if (f.function == "forward") {
            module = "forward in " + base_name(f.file);
        }
        if (module.empty()) continue;
        if (!torch_own) return module;
        if (torch_module.empty()) torch_module = std::move(module);
    }
    return torch_module;
}

}  // namespace vramscope
