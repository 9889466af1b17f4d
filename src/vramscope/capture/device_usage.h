// NVML's figure for this process on each watched device: what the driver says the process holds,
// torch's reserved memory, every library's, the CUDA context and modules together (the analysis
// splits it in its usage ledger). NVML is opened with dlopen (capture/cuda_abi.h).
//
// A device is found by its PCI bus id, because CUDA's ordinals and NVML's indices differ under
// CUDA_VISIBLE_DEVICES. This process is found in NVML's list at each read, not once: NVML may not
// list it yet as the device is first watched (its context just made), and a shared GPU lists other
// jobs beside it (several trainings, MPS, a notebook). Within a container NVML may list processes
// by the host's pids: while this process's pid has never been listed and the device runs exactly
// one compute process, that one is taken as this process ("on (device total: one process)"); a
// read that can tell neither gives nothing that time.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "capture/cuda_abi.h"

namespace vramscope::capture {

struct NvmlApi {
    abi::NvmlHandleByPciFn handle_by_pci = nullptr;
    abi::NvmlRunningProcessesFn running_processes = nullptr;
    abi::NvmlErrorStringFn error_string = nullptr;  // may be null
};

class DeviceUsage {
public:
    using Clock = std::chrono::steady_clock;
    // NVML is asked from the training thread at step ends, at most once per 20 ms a device, and
    // no sooner than kCostShare times what a read takes: a read costs tens of microseconds to a
    // millisecond (0.19 ms measured on an H200 host, a quarter of vramscope's cost on a 48 ms
    // step), and is held to a thousandth of the run's time a device, whatever the step's length.
    // A read's cost is the least of the last kCosts: one read slowed by preemption would hold
    // the next back for seconds.
    static constexpr auto kMinInterval = std::chrono::milliseconds(20);
    static constexpr int kCostShare = 1000;
    static constexpr size_t kCosts = 4;

    // NVML from libnvidia-ml.so.1, initialised; null with `why` when it cannot be.
    static std::unique_ptr<DeviceUsage> open(std::string& why);
    // Over these calls (a test's fakes); `pid` is this process's as NVML should list it.
    DeviceUsage(const NvmlApi& api, unsigned pid);

    // Reads `device` (a CUDA ordinal) from now on: "" when it can, else why not.
    std::string watch(uint8_t device, std::string_view pci_bus_id);

    struct Reading {
        uint8_t device;
        uint64_t bytes;
    };
    // Each watched device's figure now; one read sooner than due (kMinInterval, kCostShare) is
    // skipped unless `every`. A device NVML does not answer for gives nothing this time.
    std::vector<Reading> read(Clock::time_point now, bool every);

    // The trace's meta "capture.nvml": "on", "on (device total: one process)", "on (not listed
    // yet: ...)" before any read found this process, or "off: why".
    std::string state() const;

private:
    // Who it was last read as: not yet, this process by its pid (from then on only so), or the
    // device's only process.
    enum class Whose { not_listed, this_process, only_process };
    struct Watched {
        uint8_t device;
        abi::NvmlDevice handle;
        Whose whose = Whose::not_listed;
        Clock::time_point last{};
        std::array<Clock::duration, kCosts> costs{};  // what its last reads took
        size_t reads = 0;
    };
    std::string error(abi::NvmlReturn r) const;
    // The device's compute processes; false when NVML fails.
    bool processes(abi::NvmlDevice handle, std::vector<abi::NvmlProcessInfo>& out, std::string& why) const;
    // What this process holds among `listed`, found by its pid, else (while its pid was never
    // listed) as the only process; w.whose says which. False when it cannot be told.
    bool bytes_of(Watched& w, const std::vector<abi::NvmlProcessInfo>& listed, uint64_t& bytes) const;

    NvmlApi api_;
    unsigned pid_;
    mutable std::mutex mutex_;
    std::vector<Watched> watched_;
    std::vector<abi::NvmlProcessInfo> listed_;  // reused between reads
    std::string off_;  // why the devices not watched are not
    std::string not_listed_;  // where this process was not listed as a device was first watched
};

}  // namespace vramscope::capture
