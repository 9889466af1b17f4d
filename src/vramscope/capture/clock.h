// Microseconds since the epoch for every allocator event, cheaply.
//
// On cloud VMs clock_gettime is often a real system call (the kernel's clocksource is not the
// TSC), ~0.5 µs: three of them per allocate+free were half of capture's cost on the H100 host.
// The cycle counter reads in nanoseconds; it is tied to the wall clock at start and its rate is
// re-measured by whoever calls recalibrate() (the recorder's flusher, twice a second). torch's
// own ApproximateClock does the same for its recorder.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace vramscope::capture {

class EventClock {
public:
    EventClock() : ticks0_(ticks()), micros0_(wall_us()) {
        // A first rate over ~2 ms, so that the first events are already close.
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
        while (std::chrono::steady_clock::now() < until) {
        }
        recalibrate();
    }

    int64_t now_us() const {
        const double per_tick = micros_per_tick_.load(std::memory_order_relaxed);
        if (per_tick <= 0) return wall_us();
        return micros0_ + int64_t(double(ticks() - ticks0_) * per_tick);
    }

    // The rate from the start to now: errors shrink as the span grows.
    void recalibrate() {
        const uint64_t t = ticks();
        const int64_t us = wall_us();
        if (t > ticks0_ && us > micros0_) micros_per_tick_.store(double(us - micros0_) / double(t - ticks0_));
    }

private:
    static int64_t wall_us() {
        return std::chrono::duration_cast<std::chrono::microseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
            .count();
    }
    static uint64_t ticks() {
#if defined(__x86_64__) || defined(__i386__)
        return __rdtsc();
#elif defined(__aarch64__)
        uint64_t v;
        asm volatile("mrs %0, cntvct_el0" : "=r"(v));
        return v;
#else
        return uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
    }

    const uint64_t ticks0_;
    const int64_t micros0_;
    std::atomic<double> micros_per_tick_{0};
};

}  // namespace vramscope::capture
