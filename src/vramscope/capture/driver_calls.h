// Memory taken from the CUDA driver outside torch's caching allocator: device memory that libraries
// allocate themselves (NCCL, CuPy, JAX, cuBLAS/cuDNN workspaces, an extension calling cudaMalloc)
// and page-locked host memory (any library's, torch's host allocator included), seen through
// CUPTI's callback API. Only the driver domain's memory calls are enabled, looked up by name: a
// kernel launch pays nothing. The runtime's cudaMalloc and cudaHostAlloc reach the driver's
// cuMemAlloc_v2 and cuMemHostAlloc, whose callbacks fire for them too (seen on an H100 with CUDA
// 13: CuPy, a ctypes cudaMalloc, torch's own segments), so the runtime domain is not needed.
//
// At a successful call's exit the parameters are decoded, the calling library found
// (calling_library.h) and the event handed to the recorder. Torch's own device segments are left to
// the allocator hook, which records them already; torch's pinned host memory is recorded here.
// A free is recorded only for memory this capture saw allocated, with the size it had.
//
// CUPTI takes one subscriber per process: if a profiler (torch.profiler's Kineto, Nsight) holds it,
// start() says so and the capture goes on without this.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "capture/calling_library.h"
#include "capture/cuda_abi.h"

namespace vramscope::capture {

class Recorder;

// The parameter layouts of the memory calls capture decodes (cuda_abi.h), by what the call does.
enum class CallShape : uint8_t {
    device_alloc,   // dptr out, bytesize
    pitch_alloc,    // dptr out, pitch out, width, height
    device_free,    // dptr
    handle_create,  // VMM handle out, size, properties (where the memory lives)
    handle_release, // VMM handle
    handle_map,     // address, size, offset, VMM handle
    host_alloc,     // host pointer out, bytesize
    host_register,  // host pointer, bytesize
    host_release,   // host pointer
};
struct WatchedCall {
    std::string_view name;  // as cuptiGetCallbackName spells it
    CallShape shape;
};
// cuMemMap is watched only to learn where a handle's memory can be found (the address that owner
// searches look for); cuMemUnmap is not: no physical memory changes hands.
inline constexpr WatchedCall kWatchedCalls[] = {
    {"cuMemAlloc_v2", CallShape::device_alloc},
    {"cuMemAllocManaged", CallShape::device_alloc},
    {"cuMemAllocAsync", CallShape::device_alloc},
    {"cuMemAllocAsync_ptsz", CallShape::device_alloc},
    {"cuMemAllocFromPoolAsync", CallShape::device_alloc},
    {"cuMemAllocFromPoolAsync_ptsz", CallShape::device_alloc},
    {"cuMemAllocPitch_v2", CallShape::pitch_alloc},
    {"cuMemFree_v2", CallShape::device_free},
    {"cuMemFreeAsync", CallShape::device_free},
    {"cuMemFreeAsync_ptsz", CallShape::device_free},
    {"cuMemCreate", CallShape::handle_create},
    {"cuMemRelease", CallShape::handle_release},
    {"cuMemMap", CallShape::handle_map},
    {"cuMemHostAlloc", CallShape::host_alloc},
    {"cuMemAllocHost_v2", CallShape::host_alloc},
    {"cuMemHostRegister_v2", CallShape::host_register},
    {"cuMemHostUnregister", CallShape::host_release},
    {"cuMemFreeHost", CallShape::host_release},
};

// Where an address lives: a VMM handle is no address, so it has a space of its own.
enum class Space : uint8_t { device, host, handle };

// One memory call, decoded.
struct DriverMemory {
    bool allocated;  // false: freed
    Space space;
    uint64_t addr;   // a pointer, or a VMM handle's value
    uint64_t size;   // 0 for a free (the live set knows it)
    bool pinned;     // host memory (a VMM handle may be created on the host too)
    int device;      // -1: the device of the calling context
    uint64_t handle = 0;  // handle_map: the handle mapped at addr, whole (offset 0 and its size), else 0
};
// Reads a successful call's parameters as its shape lays them out.
DriverMemory decode(CallShape shape, const void* params);

// The allocations outside torch's allocator this capture saw and that are still live: frees are
// recorded only for these, with their size and device. Driver memory calls are rare and may come
// from any thread, so a mutex guards it.
class ExternalBlocks {
public:
    // An allocation: recorded (and kept) unless it is torch's own device memory.
    void allocated(Recorder& recorder, const DriverMemory& m, uint8_t device, const CallingLibrary& caller,
                   std::string_view call);
    // A free: recorded only for a block seen allocated.
    void freed(Recorder& recorder, const DriverMemory& m);
    // A VMM handle mapped whole at an address: from now on its block is known by that address
    // (owners hold addresses, never handles), recorded as the handle's free and, right after it, an
    // allocation at the address, so the bytes held stay as they were. Its release frees it there.
    void mapped(Recorder& recorder, const DriverMemory& m, const CallingLibrary& caller);
    size_t live() const;
    // A new capture starts: what an earlier one saw is not its to free.
    void clear();

private:
    struct Block {
        uint64_t size;
        uint8_t device;
        bool pinned;
    };
    struct KeyHash {
        size_t operator()(const std::pair<Space, uint64_t>& k) const {
            return std::hash<uint64_t>{}(k.second * 3 + uint64_t(k.first));
        }
    };
    mutable std::mutex mutex_;
    std::unordered_map<std::pair<Space, uint64_t>, Block, KeyHash> live_;
    std::unordered_map<uint64_t, std::pair<Space, uint64_t>> mapped_;  // handle -> where its block is now
};

// The one CUPTI subscription of the process, feeding one recorder at a time.
class DriverCalls {
public:
    static DriverCalls& instance();

    // Loads CUPTI (the one already loaded, else from `dirs` (torch's wheel ships it), the loader's
    // path, then /usr/local/cuda/extras/CUPTI/lib64), subscribes and enables the watched calls.
    // "" when on, else why not (capture goes on without it).
    std::string start(Recorder& recorder, const std::vector<std::string>& dirs);
    // Lets go of CUPTI (a profiler can take it then), if it feeds `recorder`.
    void stop(const Recorder& recorder);

private:
    DriverCalls() = default;
    std::string load(const std::vector<std::string>& dirs);
    std::string result_text(abi::CuptiResult r) const;
    static void on_callback(void* self, int domain, uint32_t cbid, const void* data);
    void on_call(CallShape shape, const abi::CallbackData& call);

    std::mutex mutex_;  // start and stop
    void* cupti_ = nullptr;
    abi::SubscribeFn subscribe_ = nullptr;
    abi::UnsubscribeFn unsubscribe_ = nullptr;
    abi::EnableCallbackFn enable_ = nullptr;
    abi::GetCallbackNameFn callback_name_ = nullptr;
    abi::GetDeviceIdFn device_id_ = nullptr;
    abi::GetResultStringFn result_string_ = nullptr;
    abi::Subscriber* subscriber_ = nullptr;
    std::vector<std::pair<uint32_t, CallShape>> enabled_;  // callback id -> shape
    // The recorder fed; recorders outlive their capture (Python keeps retired ones), so a callback
    // racing stop() never reaches freed memory.
    std::atomic<Recorder*> recorder_{nullptr};
    ExternalBlocks blocks_;
};

}  // namespace vramscope::capture
