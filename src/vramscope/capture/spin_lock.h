// A lock held only for a push or a swap: the driver events' buffer (driver_event() from any
// thread, the drain every few milliseconds) and a hook queue's spare chunks. A pthread mutex costs
// two library calls and two atomic read-modify-writes a use, this an exchange and a plain store;
// a waiter spins briefly and then yields. The allocator hook's own path takes no lock at all
// (capture/chunk_queue.h).
#pragma once
#include <atomic>
#include <thread>

namespace vramscope::capture {

class SpinLock {
public:
    void lock() noexcept {
        while (busy_.exchange(true, std::memory_order_acquire)) wait();
    }
    void unlock() noexcept { busy_.store(false, std::memory_order_release); }

private:
    void wait() noexcept {
        for (int spins = 0; busy_.load(std::memory_order_relaxed); ++spins) {
            if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
                __builtin_ia32_pause();
#elif defined(__aarch64__)
                asm volatile("yield");
#endif
            } else {
                std::this_thread::yield();
            }
        }
    }

    std::atomic<bool> busy_{false};
};

}  // namespace vramscope::capture
