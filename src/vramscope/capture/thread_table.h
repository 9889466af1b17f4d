// The allocator hook's state for the thread that calls it, found without a TLS lookup.
//
// A thread_local in a library Python loads (dlopen) is found through __tls_get_addr: a call that
// reads the thread's DTV, its entry for the library and the loader's generation count, four or
// five lines that a training step has pushed out of the caches by the next allocation (callgrind,
// bench/sink_instructions.py). The thread pointer is a register (x86-64: the TCB's address at
// %fs:0, a line every stack-protected function reads; AArch64: TPIDR_EL0), unique among live
// threads; it keys a small table here, a line a bucket. A thread that ends leaves its entry to
// the next thread the C library puts at the same address, which is safe: the two never run at
// once, and the state is the table's, not the thread's.
#pragma once
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace vramscope::capture {

inline uintptr_t thread_pointer() {
    uintptr_t p;
#if defined(__x86_64__)
    asm("mov %%fs:0, %0" : "=r"(p));
#elif defined(__aarch64__)
    asm("mrs %0, tpidr_el0" : "=r"(p));
#else
    static thread_local char here;
    p = reinterpret_cast<uintptr_t>(&here);
#endif
    return p;
}

template <class T>
class ThreadTable {
public:
    // The state of the thread at `me`, or null if it has none in its bucket yet.
    T* find(uintptr_t me) const {
        const Bucket& b = buckets_[bucket_of(me)];
        for (size_t i = 0; i < kWays; ++i)
            if (b.thread[i].load(std::memory_order_acquire) == me) return b.state[i];
        return nullptr;
    }
    // The state of the thread at `me`, made by make() if it has none; put in its bucket if there
    // is room (else the thread comes here at every call: slower, never wrong). Throws what make()
    // or the map throw.
    template <class Make>
    T* join(uintptr_t me, Make&& make) {
        std::lock_guard lock(mutex_);
        std::unique_ptr<T>& state = all_[me];
        if (!state) state = make();
        Bucket& b = buckets_[bucket_of(me)];
        for (size_t i = 0; i < kWays; ++i) {
            if (b.thread[i].load(std::memory_order_relaxed) != 0) continue;
            b.state[i] = state.get();
            b.thread[i].store(me, std::memory_order_release);  // publishes state[i] with it
            break;
        }
        return state.get();
    }

    static constexpr size_t kWays = 4, kBucketBits = 6, kBuckets = size_t(1) << kBucketBits;
    static size_t bucket_of(uintptr_t me) { return size_t((uint64_t(me) * 0x9E3779B97F4A7C15ull) >> (64 - kBucketBits)); }

private:
    struct alignas(64) Bucket {
        std::atomic<uintptr_t> thread[kWays]{};  // 0: free; set once
        T* state[kWays]{};
    };
    static_assert(sizeof(Bucket) == 64);

    std::array<Bucket, kBuckets> buckets_;
    std::mutex mutex_;
    std::unordered_map<uintptr_t, std::unique_ptr<T>> all_;  // every thread's, whether in a bucket or not
};

}  // namespace vramscope::capture
