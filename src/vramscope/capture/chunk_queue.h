// One hook thread's events on their way to the drain: one writer (the thread), one reader (the
// drain, under the recorder's lock), items in chunks of kChunk.
//
// Why not a lock around a vector: a lock is an atomic read-modify-write, which on x86 also waits
// for every store before it (the walked frames, the event) to reach the cache; here the writer
// publishes each item with a plain release store of its chunk's count. Why chunks: a full chunk
// links the next, so a reader that falls behind costs memory, never an item; the reader hands the
// chunks it emptied back for reuse, so a steady run allocates none.
//
// Why the writer asks for the next item's lines ahead: a reused chunk's lines were last read by
// the reader, on another core, and a store to such a line must first take it back from there.
// The hook's caller, torch's allocator, releases its lock soon after the hook, and a lock release
// waits for that store: 76 to 93 ns an event on the H200 hosts, waited for inside the hook (an
// mfence after the sink's stores, timed around the call), 23 to 25 ns with the line asked for at the previous push, which
// is the writer's by the time the next event comes (microseconds later in a training step).
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "capture/spin_lock.h"

namespace vramscope::capture {

template <class T, uint32_t kChunk = 512>
class ChunkQueue {
    struct Chunk {
        std::atomic<uint32_t> count{0};  // items published
        std::atomic<Chunk*> next{nullptr};
        T items[kChunk];
    };

public:
    // The writer's end, kept by the writing thread itself (the queue outlives it).
    class Writer {
    public:
        Writer() = default;
        explicit Writer(ChunkQueue& q) : queue_(&q), tail_(q.head_), prefetch_(can_prefetch_for_write()) {}
        // Throws std::bad_alloc, having published nothing.
        void push(const T& item) {
            uint32_t n = count_;
            if (n == kChunk) [[unlikely]] {
                tail_ = queue_->link_after(tail_);
                n = 0;
            }
            tail_->items[n] = item;
            tail_->count.store(n + 1, std::memory_order_release);
            count_ = n + 1;
            if (prefetch_ && n + 1 < kChunk) {  // the next item's first and last lines
                const char* next = reinterpret_cast<const char*>(tail_->items + n + 1);
                prefetch_for_write(next);
                prefetch_for_write(next + sizeof(T) - 1);
            }
        }

    private:
        ChunkQueue* queue_ = nullptr;
        Chunk* tail_ = nullptr;
        uint32_t count_ = 0;
        bool prefetch_ = false;
    };

    ChunkQueue() : head_(new Chunk) {}
    ~ChunkQueue() {
        for (Chunk* c = head_; c;) delete std::exchange(c, c->next.load(std::memory_order_relaxed));
        for (Chunk* c : spare_) delete c;
    }
    ChunkQueue(const ChunkQueue&) = delete;
    ChunkQueue& operator=(const ChunkQueue&) = delete;

    // The reader: appends every item published so far, in order.
    void take(std::vector<T>& out) {
        for (;;) {
            const uint32_t n = head_->count.load(std::memory_order_acquire);
            out.insert(out.end(), head_->items + read_, head_->items + n);
            read_ = n;
            Chunk* next = n == kChunk ? head_->next.load(std::memory_order_acquire) : nullptr;
            if (!next) return;
            std::lock_guard lock(spare_lock_);
            spare_.push_back(head_);  // the writer has left it for `next`
            head_ = next;
            read_ = 0;
        }
    }

private:
    // x86's PREFETCHW is a CPUID feature (PRFCHW), asked for once per writer; Arm's is baseline.
    static bool can_prefetch_for_write() {
#if defined(__x86_64__) || defined(__i386__)
        unsigned a = 0, b = 0, c = 0, d = 0;
        return __get_cpuid(0x80000001, &a, &b, &c, &d) && (c & (1u << 8));
#else
        return true;
#endif
    }
    static void prefetch_for_write(const char* p) {
#if defined(__x86_64__) || defined(__i386__)
        asm volatile("prefetchw %0" ::"m"(*p));
#else
        __builtin_prefetch(p, 1, 3);
#endif
    }

    [[gnu::cold, gnu::noinline]] Chunk* link_after(Chunk* full) {
        Chunk* c = nullptr;
        {
            std::lock_guard lock(spare_lock_);
            if (!spare_.empty()) c = spare_.back(), spare_.pop_back();
        }
        if (c) {
            c->count.store(0, std::memory_order_relaxed);
            c->next.store(nullptr, std::memory_order_relaxed);
        } else {
            c = new Chunk;
        }
        full->next.store(c, std::memory_order_release);  // publishes the reset fields with it
        return c;
    }

    Chunk* head_;  // the reader's
    uint32_t read_ = 0;
    SpinLock spare_lock_;
    std::vector<Chunk*> spare_;
};

}  // namespace vramscope::capture
