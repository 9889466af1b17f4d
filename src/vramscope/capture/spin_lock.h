// The lock on one hook thread's event buffer. Its owner takes it at every allocator event, the
// drain once every few milliseconds to swap the buffer out: a pthread mutex costs two library
// calls and two atomic read-modify-writes per event, this an exchange and a plain store, and it
// is only ever held for a push or a swap, so a waiter spins briefly and then yields.
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
