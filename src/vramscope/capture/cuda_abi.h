// The slice of CUPTI's, the CUDA driver's and NVML's C ABI that driver-level capture uses, declared
// here so that the build needs no CUDA toolkit (CI has none): the libraries are opened with dlopen
// at run time. Layouts checked against CUDA 13.0's cupti_callbacks.h, cupti_result.h,
// generated_cuda_meta.h and cuda.h; NVML's against its documented ABI (nvml.h is not in the
// toolkit). Every struct here is a prefix of the real one: only the fields read are declared.
#pragma once
#include <cstddef>
#include <cstdint>

namespace vramscope::capture::abi {

// --- CUPTI (cupti_result.h, cupti_callbacks.h, cupti_activity.h) ---------------------------------
using CuptiResult = int;
inline constexpr CuptiResult kCuptiSuccess = 0;
inline constexpr CuptiResult kCuptiMultipleSubscribers = 39;  // CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED

inline constexpr int kDriverDomain = 1;  // CUPTI_CB_DOMAIN_DRIVER_API
inline constexpr int kApiExit = 1;       // CUPTI_API_EXIT
// Callback ids run from 1 (CUDA 13's driver domain has 806); ids are looked up by name up to here,
// and one with no name (past the last, or retired) is skipped.
inline constexpr uint32_t kMaxCallbackId = 4096;

struct CallbackData {  // CUpti_CallbackData
    int callbackSite;  // CUpti_ApiCallbackSite
    const char* functionName;
    const void* functionParams;
    void* functionReturnValue;  // CUresult* in the driver domain
    const char* symbolName;
    void* context;  // CUcontext
    uint32_t contextUid;
    uint64_t* correlationData;
    uint32_t correlationId;
};
static_assert(offsetof(CallbackData, functionParams) == 16 && offsetof(CallbackData, context) == 40 &&
              offsetof(CallbackData, correlationId) == 64);

struct Subscriber;  // CUpti_Subscriber_st
using CallbackFunc = void (*)(void* userdata, int domain, uint32_t cbid, const void* data);
using SubscribeFn = CuptiResult (*)(Subscriber** subscriber, CallbackFunc callback, void* userdata);
using UnsubscribeFn = CuptiResult (*)(Subscriber* subscriber);
using EnableCallbackFn = CuptiResult (*)(uint32_t enable, Subscriber* subscriber, int domain, uint32_t cbid);
using GetCallbackNameFn = CuptiResult (*)(int domain, uint32_t cbid, const char** name);
using GetDeviceIdFn = CuptiResult (*)(void* context, uint32_t* device);
using GetResultStringFn = CuptiResult (*)(CuptiResult result, const char** text);

// --- The driver's memory calls' parameters (generated_cuda_meta.h) --------------------------------
using CUresult = int;  // 0: CUDA_SUCCESS

// cuMemAlloc_v2. cuMemAllocManaged (+ flags), cuMemAllocAsync[_ptsz] (+ stream) and
// cuMemAllocFromPoolAsync[_ptsz] (+ pool, stream) begin with these two fields.
struct MemAllocParams {
    uint64_t* dptr;
    size_t bytesize;
};
struct MemAllocPitchParams {  // cuMemAllocPitch_v2
    uint64_t* dptr;
    size_t* pPitch;
    size_t WidthInBytes;
    size_t Height;
    unsigned ElementSizeBytes;
};
// cuMemFree_v2; cuMemFreeAsync[_ptsz] (+ stream) begins with it.
struct MemFreeParams {
    uint64_t dptr;
};

// cuda.h: CUmemLocation and the head of CUmemAllocationProp.
inline constexpr int kLocationDevice = 1;  // CU_MEM_LOCATION_TYPE_DEVICE; 2..4 are the host's
struct MemLocation {
    int type;
    int id;
};
struct MemAllocationProp {
    int type;
    int requestedHandleTypes;
    MemLocation location;
};
struct MemCreateParams {  // cuMemCreate
    uint64_t* handle;     // CUmemGenericAllocationHandle*
    size_t size;
    const MemAllocationProp* prop;
    unsigned long long flags;
};
struct MemReleaseParams {  // cuMemRelease
    uint64_t handle;
};
struct MemMapParams {  // cuMemMap
    uint64_t ptr;     // CUdeviceptr
    size_t size;
    size_t offset;
    uint64_t handle;  // CUmemGenericAllocationHandle
    unsigned long long flags;
};

// cuMemAllocHost_v2; cuMemHostAlloc (+ flags) begins with it.
struct MemHostAllocParams {
    void** pp;
    size_t bytesize;
};
// cuMemHostRegister_v2 (+ flags).
struct MemHostRegisterParams {
    void* p;
    size_t bytesize;
};
// cuMemHostUnregister, cuMemFreeHost.
struct MemHostPointerParams {
    void* p;
};

// --- NVML ----------------------------------------------------------------------------------------
using NvmlReturn = int;
inline constexpr NvmlReturn kNvmlSuccess = 0;
inline constexpr NvmlReturn kNvmlInsufficientSize = 7;  // NVML_ERROR_INSUFFICIENT_SIZE
inline constexpr unsigned long long kNvmlValueNotAvailable = ~0ull;  // NVML_VALUE_NOT_AVAILABLE

struct NvmlDeviceSt;
using NvmlDevice = NvmlDeviceSt*;
struct NvmlProcessInfo {  // nvmlProcessInfo_t, as _v3 and _v2 of the running-processes call fill it
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId;
    unsigned computeInstanceId;
};
static_assert(sizeof(NvmlProcessInfo) == 24);

using NvmlInitFn = NvmlReturn (*)();                                          // nvmlInit_v2
using NvmlHandleByPciFn = NvmlReturn (*)(const char* pci_bus_id, NvmlDevice*);  // ..._v2
using NvmlRunningProcessesFn = NvmlReturn (*)(NvmlDevice, unsigned* count, NvmlProcessInfo* infos);
using NvmlErrorStringFn = const char* (*)(NvmlReturn);

}  // namespace vramscope::capture::abi
