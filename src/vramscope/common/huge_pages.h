// An allocator for the few big arrays (decoded pickle values, events): it asks the kernel for
// transparent huge pages, so filling 500 MB costs ~250 page faults instead of ~125,000. Importing
// a large snapshot was spending more time in page faults than in parsing.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>

namespace vramscope {

template <class T> struct HugePageAllocator {
    using value_type = T;
    static constexpr size_t kHuge = 2u << 20;
    static constexpr size_t kThreshold = 4u << 20;  // below this, plain malloc

    HugePageAllocator() = default;
    template <class U> HugePageAllocator(const HugePageAllocator<U>&) {}

    T* allocate(size_t n) {
        const size_t bytes = n * sizeof(T);
        if (bytes < kThreshold) {
            if (void* p = std::malloc(bytes)) return static_cast<T*>(p);
            throw std::bad_alloc();
        }
        const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
        void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        madvise(p, rounded, MADV_HUGEPAGE);  // advice only: without THP it is plain memory
        return static_cast<T*>(p);
    }
    void deallocate(T* p, size_t n) {
        const size_t bytes = n * sizeof(T);
        if (bytes < kThreshold) return std::free(p);
        munmap(p, (bytes + kHuge - 1) / kHuge * kHuge);
    }
    template <class U> bool operator==(const HugePageAllocator<U>&) const { return true; }
};

template <class T> using BigVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace vramscope
