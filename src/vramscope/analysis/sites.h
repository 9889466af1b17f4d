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
