// Where a test writes a trace: the test temp folder, the name and this process's id (ctest runs
// the tests as processes side by side).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace vramscope::testing {

inline std::string temp_trace(const std::string& name) {
    return (std::filesystem::path(::testing::TempDir()) / (name + "_" + std::to_string(::getpid()) + ".vscope"))
        .string();
}

}  // namespace vramscope::testing
