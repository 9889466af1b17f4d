#include "capture/device_usage.h"

#include <algorithm>

#include <dlfcn.h>
#include <unistd.h>

namespace vramscope::capture {

std::unique_ptr<DeviceUsage> DeviceUsage::open(std::string& why) {
    // Never closed: NVML stays loaded for the process (pynvml and others may share it).
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        why = std::string("libnvidia-ml.so.1 not found (") + dlerror() + ")";
        return nullptr;
    }
    auto init = reinterpret_cast<abi::NvmlInitFn>(dlsym(lib, "nvmlInit_v2"));
    NvmlApi api;
    api.handle_by_pci = reinterpret_cast<abi::NvmlHandleByPciFn>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    api.running_processes =
        reinterpret_cast<abi::NvmlRunningProcessesFn>(dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3"));
    if (!api.running_processes)  // drivers before 510 (both fill the same records)
        api.running_processes =
            reinterpret_cast<abi::NvmlRunningProcessesFn>(dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v2"));
    api.error_string = reinterpret_cast<abi::NvmlErrorStringFn>(dlsym(lib, "nvmlErrorString"));
    if (!init || !api.handle_by_pci || !api.running_processes) {
        why = "this NVML lacks the per-process calls (driver too old)";
        return nullptr;
    }
    auto usage = std::make_unique<DeviceUsage>(api, unsigned(getpid()));
    if (const abi::NvmlReturn r = init(); r != abi::kNvmlSuccess) {
        why = "nvmlInit failed: " + usage->error(r);
        return nullptr;
    }
    return usage;
}

DeviceUsage::DeviceUsage(const NvmlApi& api, unsigned pid) : api_(api), pid_(pid) {}

std::string DeviceUsage::error(abi::NvmlReturn r) const {
    const char* text = api_.error_string ? api_.error_string(r) : nullptr;
    return text ? std::string(text) : "NVML error " + std::to_string(r);
}

bool DeviceUsage::processes(abi::NvmlDevice handle, std::vector<abi::NvmlProcessInfo>& out, std::string& why) const {
    out.resize(std::max<size_t>(out.size(), 16));
    for (int attempt = 0; attempt < 4; ++attempt) {  // a process may start between the two calls
        unsigned count = unsigned(out.size());
        const abi::NvmlReturn r = api_.running_processes(handle, &count, out.data());
        if (r == abi::kNvmlSuccess) {
            out.resize(count);
            return true;
        }
        if (r != abi::kNvmlInsufficientSize) {
            why = "NVML cannot list the device's processes: " + error(r);
            return false;
        }
        out.resize(size_t(count) + 8);
    }
    why = "NVML's process list kept growing";
    return false;
}

bool DeviceUsage::bytes_of(Watched& w, const std::vector<abi::NvmlProcessInfo>& listed, uint64_t& bytes) const {
    const abi::NvmlProcessInfo* mine = nullptr;
    for (const auto& p : listed)
        if (p.pid == pid_) mine = &p;
    if (mine) w.whose = Whose::this_process;
    else if (w.whose != Whose::this_process && listed.size() == 1) mine = &listed[0], w.whose = Whose::only_process;
    if (!mine || mine->usedGpuMemory == abi::kNvmlValueNotAvailable) return false;
    bytes = mine->usedGpuMemory;
    return true;
}

std::string DeviceUsage::watch(uint8_t device, std::string_view pci_bus_id) {
    std::lock_guard lock(mutex_);
    const std::string where = "cuda:" + std::to_string(device);
    std::string why;
    abi::NvmlDevice handle = nullptr;
    const std::string bus(pci_bus_id);
    if (const abi::NvmlReturn r = api_.handle_by_pci(bus.c_str(), &handle); r != abi::kNvmlSuccess) {
        why = where + ": NVML knows no device at PCI " + bus + " (" + error(r) + ")";
    } else if (processes(handle, listed_, why)) {
        Watched& w = watched_.emplace_back(Watched{device, handle});
        uint64_t bytes = 0;
        if (!bytes_of(w, listed_, bytes))
            not_listed_ = where + ": NVML lists " + std::to_string(listed_.size()) + " compute processes, not this one (pid " +
                          std::to_string(pid_) + "): read once it does";
        return "";
    } else {
        why = where + ": " + why;
    }
    off_ += (off_.empty() ? "" : "; ") + why;
    return why;
}

std::vector<DeviceUsage::Reading> DeviceUsage::read(Clock::time_point now, bool every) {
    std::lock_guard lock(mutex_);
    std::vector<Reading> out;
    std::string why;
    for (Watched& w : watched_) {
        const Clock::duration cost = *std::min_element(w.costs.begin(), w.costs.end());
        if (!every && w.reads && now - w.last < std::max<Clock::duration>(kMinInterval, kCostShare * cost)) continue;
        w.last = now;
        uint64_t bytes = 0;
        const Clock::time_point began = Clock::now();  // `now` may be a test's
        const bool read = processes(w.handle, listed_, why) && bytes_of(w, listed_, bytes);
        w.costs[w.reads++ % kCosts] = Clock::now() - began;
        if (read) out.push_back(Reading{w.device, bytes});
    }
    return out;
}

std::string DeviceUsage::state() const {
    std::lock_guard lock(mutex_);
    if (watched_.empty()) return "off: " + (off_.empty() ? std::string("no device watched") : off_);
    bool listed = false;
    for (const Watched& w : watched_) {
        if (w.whose == Whose::only_process) return "on (device total: one process)";
        listed |= w.whose == Whose::this_process;
    }
    return listed ? "on" : "on (not listed yet: " + not_listed_ + ")";
}

}  // namespace vramscope::capture
