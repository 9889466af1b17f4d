// NVML counts the device memory a process has mapped, and the driver maps it in 2 MiB pages: a
// library's 1.5 MiB cuMemAlloc reads as 2 MiB there (CuPy's, tests/data/device/cupy_kept.vscope:
// +1.5 MiB recorded a step, +2 MiB on NVML). So part of NVML's growth beside an outside allocation
// may be the allocation's page, not memory nobody recorded.
//
// What one allocation may show on NVML beyond its own bytes, at most: the rest of its last page
// when it is larger than half a page (no other allocation fits beside it there), else nothing, since
// small ones share pages (cuSOLVER's 96.1 MiB of workspace, taken in many pieces, read 96.0 MiB on
// NVML on an H200). Only the calls that map pages of their own: a pool's
// allocations (cuMemAllocAsync, cuMemAllocFromPoolAsync) share the pool's, cuMemCreate's handles
// come in whole pages, and managed memory is not the device's alone.
#pragma once
#include <cstdint>
#include <string_view>

namespace vramscope {

inline constexpr uint64_t kDriverPage = 2ull << 20;

inline constexpr bool maps_own_pages(std::string_view driver_call) {
    return driver_call == "cuMemAlloc_v2" || driver_call == "cuMemAllocPitch_v2";
}

inline constexpr uint64_t page_rounding_bound(uint64_t size) {
    return size > kDriverPage / 2 ? (kDriverPage - size % kDriverPage) % kDriverPage : 0;
}

}  // namespace vramscope
