// An allocation's site: the innermost frame of its stack that is the user's code rather than
// torch, a library, generated code or the interpreter. The full stack stays available for display.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "events/stack_table.h"
#include "findings/findings.h"

namespace vramscope {

// True for frames of torch, installed packages, the standard library, generated code, C++ and
// shared objects (the library that called the CUDA driver, analysis/libraries.h).
bool is_internal_frame(std::string_view file);
// Generated code (inductor's output, Triton kernels, FX graphs): never a site; the nearest user
// frame that called it stands in.
bool is_generated_frame(std::string_view file);

// How good a frame is as a site, best first. When no frame of a stack is the user's (the
// autograd engine, torch's own allocations), a Python frame of the library beats C++, and C++
// that does work beats the unwinder, the allocator and the dispatcher that merely pass through.
enum class FrameRank : uint8_t { user, library, cpp, machinery };
FrameRank rank_frame(std::string_view file, std::string_view function);
// The part of the rank the file alone decides: user, library, or cpp (C++ or a shared object,
// whose function may make it machinery). A file named by many frames is ranked once this way.
FrameRank rank_file(std::string_view file);
FrameRank rank_frame(FrameRank file_rank, std::string_view function);

// The site rule, fed a stack's frames innermost first: the innermost frame of the best rank.
// Capture (which sees raw frames) and SiteResolver (a StackTable) both use it.
struct SitePick {
    uint32_t site = 0;
    FrameRank rank = FrameRank::machinery;
    // Returns true once the site is found (later frames change nothing).
    bool see(uint32_t frame, FrameRank r) {
        if (!site || r < rank) site = frame, rank = r;
        return rank == FrameRank::user;
    }
};

// A frame of the table as findings spell it (frame 0: kNoPythonFrame), and a stack's, innermost first.
SourceLine source_line(const StackTable& table, uint32_t frame);
std::vector<SourceLine> stack_lines(const StackTable& table, uint32_t stack);
// Leading frames a stack is shown without: the unwinder's, the allocator's, a dispatch mode's.
size_t machinery_frames(const std::vector<SourceLine>& stack);
// The library function that allocated a stack's blocks for the user's `site`: its innermost Python
// frame from `shown_from` on outside torch, when it is an installed package's (not the site).
std::optional<SourceLine> library_frame(const std::vector<SourceLine>& stack, size_t shown_from, const SourceLine& site);

class SiteResolver {
public:
    explicit SiteResolver(const StackTable& table) : table_(table), site_of_(table.stack_count() + 1, kUnresolved) {}

    // Frame id of the site for a stack id; 0 for an empty stack.
    uint32_t site(uint32_t stack);

private:
    static constexpr uint32_t kUnresolved = 0xFFFFFFFFu;
    const StackTable& table_;
    std::vector<uint32_t> site_of_;
    std::vector<int8_t> rank_of_frame_;  // by frame id: -1 unknown, else a FrameRank
    std::vector<int8_t> rank_of_file_;   // by string id: -1 unknown, else rank_file's
};

}  // namespace vramscope
