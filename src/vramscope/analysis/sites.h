// An allocation's site: the innermost frame of its stack that is the user's code rather than
// torch, a library, generated code or the interpreter. The full stack stays available for display.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
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
// Frames that say nothing of which library allocates: C++, shared objects, torch's own Python,
// vramscope's own and the standard library's wrappers.
bool passes_through(std::string_view file);
// What a frame's file says of who allocates, the one rule the site split's walks read (the
// analysis' SiteResolver::key, the live sink's): it passes through, it is an installed package's
// (a library function), or neither (the user's, a script).
enum class LibraryFrameKind : int8_t { passes_through, installed, other };
LibraryFrameKind library_frame_kind(std::string_view file);
// The library function that allocated a stack's blocks for the user's `site`: its innermost frame
// from `shown_from` on that does not pass through, when it is an installed package's (not the site).
std::optional<SourceLine> library_frame(const std::vector<SourceLine>& stack, size_t shown_from, const SourceLine& site);
// The nn.Module a stack's block was allocated in, as its frames name it: the innermost
// `Class.forward` outside torch (a model's own module, `LlamaMLP`; a custom autograd Function's
// forward names its class too), else torch.nn's (`Linear`). Frames
// named without their class (torch snapshots) give "forward in modeling_llama.py". Empty: none (the
// autograd engine's, an optimizer's, code outside any forward).
std::string module_of(const StackTable& table, uint32_t stack);

// A site splits by the library function that allocates under it. One line of the user's code that
// calls a library (`trainer.evaluate()`, `model(...)` of an installed model) stands for everything
// allocated beneath it: a buffer that grows (transformers' torch_pad_and_concatenate, a cache's
// update) would hide among the forward's temporaries and a workspace. Under a user's site, each
// library function (library_frame's: a function, not a line, so one update's keys and values stay
// together) is a site of its own, `via` it. A site that is itself a library's, or the user's code
// calling torch, does not split (via 0).
struct SiteKey {
    uint32_t site = 0;  // frame id
    uint32_t via = 0;   // frame id of the library function's first frame met; 0: not split
    bool operator==(const SiteKey&) const = default;
};

class SiteResolver {
public:
    explicit SiteResolver(const StackTable& table) : table_(table), site_of_(table.stack_count() + 1, kUnresolved) {}

    // Frame id of the site for a stack id; 0 for an empty stack.
    uint32_t site(uint32_t stack);
    // The site and the library function it splits by.
    SiteKey key(uint32_t stack);

private:
    static constexpr uint32_t kUnresolved = 0xFFFFFFFFu;
    const StackTable& table_;
    std::vector<uint32_t> site_of_;
    std::vector<uint32_t> via_of_;       // by stack id, once key() asked
    std::vector<int8_t> rank_of_frame_;  // by frame id: -1 unknown, else a FrameRank
    std::vector<int8_t> rank_of_file_;   // by string id: -1 unknown, else rank_file's
    std::vector<int8_t> kind_of_file_;   // by string id: -1 unknown, else a LibraryFrameKind, for key()
    std::unordered_map<uint64_t, uint32_t> function_frame_;  // file << 32 | function string ids -> first frame
};

}  // namespace vramscope
