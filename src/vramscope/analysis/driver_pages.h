// NVML counts the device memory a process has mapped, and the driver maps it in 2 MiB pages: a
// library's 1.5 MiB allocation reads as 2 MiB there (CuPy's, tests/data/device/cupy_kept.vscope:
// +1.5 MiB recorded a step, +2 MiB on NVML). So part of NVML's growth beside an outside allocation
// is the allocation's page, not memory nobody recorded.
//
// What one allocation may add to NVML's figure beyond its own bytes, at most: the rest of its last
// page, and never more than its own size, since allocations of half a page or less share pages
// (cuSOLVER's 96.1 MiB of workspace, taken in many pieces, read 96.0 MiB on NVML: stop 32). So
// many tiny allocations cannot hide growth beyond what they hold themselves.
#pragma once
#include <algorithm>
#include <cstdint>

namespace vramscope {

inline constexpr uint64_t kDriverPage = 2ull << 20;

inline constexpr uint64_t page_rounding_bound(uint64_t size) {
    return std::min((kDriverPage - size % kDriverPage) % kDriverPage, size);
}

}  // namespace vramscope
