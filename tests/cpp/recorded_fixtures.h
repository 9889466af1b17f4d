// The real snapshots recorded on a GPU (tests/data/*.pickle.gz, by tests/data/record_fixtures.py),
// in name order: what several suites run over.
#pragma once
#include <algorithm>
#include <filesystem>
#include <vector>

namespace vramscope::testing {

inline std::vector<std::filesystem::path> recorded_snapshots() {
    std::vector<std::filesystem::path> out;
    for (const auto& e : std::filesystem::directory_iterator(VRAMSCOPE_TEST_DATA))
        if (e.path().string().ends_with(".pickle.gz")) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace vramscope::testing
