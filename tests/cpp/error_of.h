// The message a call throws, or "" when it throws nothing: what the tests of refusals compare.
#pragma once
#include <exception>
#include <string>

namespace vramscope::testing {

inline std::string error_of(const auto& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

}  // namespace vramscope::testing
