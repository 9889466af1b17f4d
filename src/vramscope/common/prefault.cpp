#include "common/prefault.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>

namespace vramscope {
namespace {
constexpr uintptr_t kPage = 4096;
constexpr size_t kStep = size_t(2) << 20;  // faulted in per call: the writer's requests get in between
}  // namespace

Prefault::Prefault(size_t window_bytes) : window_(window_bytes) { worker_ = std::thread([this] { run(); }); }

Prefault::~Prefault() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
}

void Prefault::ahead_of(const void* begin, const void* end, const void* written) {
    const char* target = std::min(static_cast<const char*>(end), static_cast<const char*>(written) + window_);
    {
        std::lock_guard lock(mutex_);
        begin_ = static_cast<const char*>(begin);
        target_ = target;
    }
    cv_.notify_one();
}

void Prefault::run() {
    const char* buffer = nullptr;
    uintptr_t done = 0;  // faulted in up to here (page-aligned), in `buffer`
    bool given_up = false;  // madvise failed for `buffer`
    auto wanted = [&] { return begin_ != buffer || (!given_up && (uintptr_t(target_) & ~(kPage - 1)) > done); };
    std::unique_lock lock(mutex_);
    while (true) {
        cv_.wait(lock, [&] { return stop_ || wanted(); });
        if (stop_) return;
        if (begin_ != buffer) {  // a new buffer (the old one grew into it)
            buffer = begin_;
            done = (uintptr_t(buffer) + kPage - 1) & ~(kPage - 1);
            given_up = false;
            continue;
        }
        const uintptr_t until = std::min(uintptr_t(target_) & ~(kPage - 1), done + kStep);
        lock.unlock();
        // EINVAL (a kernel before 5.14) or ENOMEM (the buffer was freed meanwhile): nothing lost.
        const bool faulted = madvise(reinterpret_cast<void*>(done), until - done, MADV_POPULATE_WRITE) == 0;
        lock.lock();
        if (begin_ != buffer) continue;
        done = until;
        given_up = !faulted;
    }
}

}  // namespace vramscope
