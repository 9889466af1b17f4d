// An allocation's site: the innermost frame of its stack that is the user's code rather than
// torch, a library or the interpreter. The full stack stays available for display.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "events/stack_table.h"

namespace vramscope {

// True for frames of torch, installed packages, the standard library and C++ code.
bool is_internal_frame(std::string_view file);
// Generated code (inductor's output, Triton kernels, FX graphs): never a site, the nearest user
// frame that called it stands in. Also internal.
bool is_generated_frame(std::string_view file);
// The C++ unwinder and the caching allocator's own frames, which torch's stacks="all" puts first
// in every stack: true for those, which displays skip.
bool is_capture_machinery(std::string_view file, std::string_view function);

// The site rule, fed a stack's frames innermost first: the first that is not internal, else the
// innermost of all. Capture (which sees raw frames) and SiteResolver (a StackTable) both use it.
struct SitePick {
    uint32_t site = 0, innermost = 0;
    // Returns true once the site is found (later frames change nothing).
    bool see(uint32_t frame, bool internal) {
        if (!innermost) innermost = frame;
        if (!internal) site = frame;
        return site != 0;
    }
    uint32_t result() const { return site ? site : innermost; }
};

class SiteResolver {
public:
    explicit SiteResolver(const StackTable& table) : table_(table), site_of_(table.stack_count() + 1, kUnresolved) {}

    // Frame id of the site for a stack id; 0 for an empty stack. When every frame is internal,
    // the innermost one stands in (better a torch line than nothing).
    uint32_t site(uint32_t stack);

private:
    static constexpr uint32_t kUnresolved = 0xFFFFFFFFu;
    const StackTable& table_;
    std::vector<uint32_t> site_of_;
    std::vector<int8_t> internal_file_;  // by string id: -1 unknown, 0 no, 1 yes
};

}  // namespace vramscope
