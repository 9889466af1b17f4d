#include "capture/driver_calls.h"

#include <dlfcn.h>

#include "capture/recorder.h"

namespace vramscope::capture {
namespace {

template <class P>
const P& as(const void* params) {
    return *static_cast<const P*>(params);
}

uint64_t pointer_value(const void* p) { return uint64_t(reinterpret_cast<uintptr_t>(p)); }

EventKind alloc_kind(bool pinned) { return pinned ? EventKind::pinned_alloc : EventKind::external_alloc; }
EventKind free_kind(bool pinned) { return pinned ? EventKind::pinned_free : EventKind::external_free; }

}  // namespace

DriverMemory decode(CallShape shape, const void* params) {
    switch (shape) {
    case CallShape::device_alloc: {
        const auto& p = as<abi::MemAllocParams>(params);
        return {true, Space::device, *p.dptr, p.bytesize, false, -1};
    }
    case CallShape::pitch_alloc: {
        const auto& p = as<abi::MemAllocPitchParams>(params);
        return {true, Space::device, *p.dptr, uint64_t(*p.pPitch) * p.Height, false, -1};
    }
    case CallShape::device_free: return {false, Space::device, as<abi::MemFreeParams>(params).dptr, 0, false, -1};
    case CallShape::handle_create: {
        const auto& p = as<abi::MemCreateParams>(params);
        const bool on_device = !p.prop || p.prop->location.type == abi::kLocationDevice;
        return {true, Space::handle, *p.handle, p.size, !on_device, on_device && p.prop ? p.prop->location.id : -1};
    }
    case CallShape::handle_release:
        return {false, Space::handle, as<abi::MemReleaseParams>(params).handle, 0, false, -1};
    case CallShape::handle_map: {
        const auto& p = as<abi::MemMapParams>(params);
        DriverMemory m{true, Space::device, p.ptr, p.size, false, -1};
        m.handle = p.offset == 0 ? p.handle : 0;
        return m;
    }
    case CallShape::host_alloc: {
        const auto& p = as<abi::MemHostAllocParams>(params);
        return {true, Space::host, pointer_value(*p.pp), p.bytesize, true, -1};
    }
    case CallShape::host_register: {
        const auto& p = as<abi::MemHostRegisterParams>(params);
        return {true, Space::host, pointer_value(p.p), p.bytesize, true, -1};
    }
    case CallShape::host_release:
        return {false, Space::host, pointer_value(as<abi::MemHostPointerParams>(params).p), 0, true, -1};
    }
    return {false, Space::device, 0, 0, false, -1};
}

// The events are handed on under the lock: a block freed on one thread and given out again on
// another reaches the trace freed first.
void ExternalBlocks::allocated(Recorder& recorder, const DriverMemory& m, uint8_t device, const CallingLibrary& caller,
                               std::string_view call) {
    if (!m.pinned && caller.torch) return;  // a segment of torch's allocator: the hook records it
    std::lock_guard lock(mutex_);
    auto [it, added] = live_.try_emplace({m.space, m.addr}, Block{m.size, device, m.pinned});
    if (!added) {
        // Given out again, so the old block is gone (its free was not seen): said first.
        const Block old = it->second;
        recorder.driver_event(free_kind(old.pinned), old.device, m.addr, old.size, {}, {});
        it->second = Block{m.size, device, m.pinned};
    }
    recorder.driver_event(alloc_kind(m.pinned), device, m.addr, m.size, caller.path, call);
}

void ExternalBlocks::mapped(Recorder& recorder, const DriverMemory& m, const CallingLibrary& caller) {
    std::lock_guard lock(mutex_);
    auto it = live_.find({Space::handle, m.handle});
    if (!m.handle || it == live_.end() || it->second.size != m.size) return;  // torch's, unseen, or in part
    const Block b = it->second;
    live_.erase(it);
    recorder.driver_event(free_kind(b.pinned), b.device, m.handle, b.size, {}, {});
    const std::pair<Space, uint64_t> at{b.pinned ? Space::host : Space::device, m.addr};
    auto [placed, added] = live_.try_emplace(at, b);
    if (!added) {  // its free was not seen
        recorder.driver_event(free_kind(placed->second.pinned), placed->second.device, m.addr, placed->second.size, {}, {});
        placed->second = b;
    }
    mapped_[m.handle] = at;
    recorder.driver_event(alloc_kind(b.pinned), b.device, m.addr, b.size, caller.path, "cuMemCreate");
}

void ExternalBlocks::freed(Recorder& recorder, const DriverMemory& m) {
    std::lock_guard lock(mutex_);
    std::pair<Space, uint64_t> key{m.space, m.addr};
    if (m.space == Space::handle) {
        if (auto moved = mapped_.find(m.addr); moved != mapped_.end()) key = moved->second, mapped_.erase(moved);
    }
    auto it = live_.find(key);
    if (it == live_.end()) return;  // allocated before capture, or torch's own segment
    recorder.driver_event(free_kind(it->second.pinned), it->second.device, key.second, it->second.size, {}, {});
    live_.erase(it);
}

size_t ExternalBlocks::live() const {
    std::lock_guard lock(mutex_);
    return live_.size();
}

void ExternalBlocks::clear() {
    std::lock_guard lock(mutex_);
    live_.clear();
    mapped_.clear();
}

DriverCalls& DriverCalls::instance() {
    static DriverCalls* calls = new DriverCalls;  // never destroyed: a callback may come at exit
    return *calls;
}

std::string DriverCalls::result_text(abi::CuptiResult r) const {
    const char* text = nullptr;
    if (result_string_ && result_string_(r, &text) == abi::kCuptiSuccess && text) return text;
    return "CUPTI error " + std::to_string(r);
}

std::string DriverCalls::load(const std::vector<std::string>& dirs) {
    if (cupti_) return "";
    static constexpr const char* kNames[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
    // One CUPTI per process: the copy torch's profiler loaded, if it did.
    for (const char* name : kNames)
        if ((cupti_ = dlopen(name, RTLD_NOW | RTLD_NOLOAD))) break;
    std::vector<std::string> places = dirs;
    places.push_back("");  // the loader's path
    places.push_back("/usr/local/cuda/extras/CUPTI/lib64");
    for (const std::string& dir : places) {
        for (const char* name : kNames) {
            if (cupti_) break;
            cupti_ = dlopen((dir.empty() ? std::string(name) : dir + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
        }
    }
    if (!cupti_) return "libcupti not found (torch's nvidia/*/lib, the loader's path, /usr/local/cuda/extras/CUPTI/lib64)";
    subscribe_ = reinterpret_cast<abi::SubscribeFn>(dlsym(cupti_, "cuptiSubscribe"));
    unsubscribe_ = reinterpret_cast<abi::UnsubscribeFn>(dlsym(cupti_, "cuptiUnsubscribe"));
    enable_ = reinterpret_cast<abi::EnableCallbackFn>(dlsym(cupti_, "cuptiEnableCallback"));
    callback_name_ = reinterpret_cast<abi::GetCallbackNameFn>(dlsym(cupti_, "cuptiGetCallbackName"));
    device_id_ = reinterpret_cast<abi::GetDeviceIdFn>(dlsym(cupti_, "cuptiGetDeviceId"));
    result_string_ = reinterpret_cast<abi::GetResultStringFn>(dlsym(cupti_, "cuptiGetResultString"));
    if (!subscribe_ || !unsubscribe_ || !enable_ || !callback_name_ || !device_id_) {
        cupti_ = nullptr;  // left loaded: closing a library the process may share is worse
        return "this libcupti lacks the callback API";
    }
    return "";
}

std::string DriverCalls::start(Recorder& recorder, const std::vector<std::string>& dirs) {
    std::lock_guard lock(mutex_);
    if (std::string why = load(dirs); !why.empty()) return why;
    if (!subscriber_) {
        const abi::CuptiResult r = subscribe_(&subscriber_, &DriverCalls::on_callback, this);
        if (r != abi::kCuptiSuccess) {
            subscriber_ = nullptr;
            return r == abi::kCuptiMultipleSubscribers
                       ? "another CUPTI client holds CUPTI (a profiler: torch.profiler, Nsight Systems or Compute)"
                       : "cuptiSubscribe failed: " + result_text(r);
        }
        enabled_.clear();
        for (uint32_t id = 1; id < abi::kMaxCallbackId; ++id) {
            const char* name = nullptr;
            if (callback_name_(abi::kDriverDomain, id, &name) != abi::kCuptiSuccess || !name) continue;
            for (const WatchedCall& w : kWatchedCalls)
                if (w.name == name && enable_(1, subscriber_, abi::kDriverDomain, id) == abi::kCuptiSuccess)
                    enabled_.emplace_back(id, w.shape);
        }
        if (enabled_.empty()) {
            unsubscribe_(subscriber_);
            subscriber_ = nullptr;
            return "this CUPTI names none of the driver's memory calls";
        }
    }
    blocks_.clear();
    recorder_.store(&recorder, std::memory_order_release);
    return "";
}

void DriverCalls::stop(const Recorder& recorder) {
    std::lock_guard lock(mutex_);
    if (recorder_.load(std::memory_order_relaxed) != &recorder) return;  // a later capture's now
    recorder_.store(nullptr, std::memory_order_release);
    if (subscriber_) unsubscribe_(subscriber_);
    subscriber_ = nullptr;
}

void DriverCalls::on_callback(void* self, int domain, uint32_t cbid, const void* data) {
    const auto& call = *static_cast<const abi::CallbackData*>(data);
    if (domain != abi::kDriverDomain || call.callbackSite != abi::kApiExit || !call.functionReturnValue ||
        *static_cast<const abi::CUresult*>(call.functionReturnValue) != 0 || !call.functionParams)
        return;
    auto& calls = *static_cast<DriverCalls*>(self);
    for (const auto& [id, shape] : calls.enabled_)
        if (id == cbid) return calls.on_call(shape, call);
}

void DriverCalls::on_call(CallShape shape, const abi::CallbackData& call) {
    Recorder* recorder = recorder_.load(std::memory_order_acquire);
    if (!recorder) return;
    const DriverMemory m = decode(shape, call.functionParams);
    if (!m.allocated) return blocks_.freed(*recorder, m);
    if (shape == CallShape::handle_map) return blocks_.mapped(*recorder, m, calling_library());
    uint32_t device = m.device >= 0 ? uint32_t(m.device) : 0;
    if (m.device < 0 && call.context) device_id_(call.context, &device);
    blocks_.allocated(*recorder, m, uint8_t(device), calling_library(),
                      call.functionName ? std::string_view(call.functionName) : std::string_view());
}

}  // namespace vramscope::capture
