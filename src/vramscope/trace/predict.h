// What the next block event probably looks like, learned from the ones before. Writer and reader
// each keep one and update it identically, so a correct guess costs a flag bit instead of a field
// (format.h). Guesses that fail cost nothing but the lookup. Inlined: the reader runs them per
// event, its tests of the kind folded away.
#pragma once
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "events/event.h"

namespace vramscope::format {

class Predictors {
public:
    // An alloc's size: the last alloc's at the same stack. Any other block event's: the size
    // last seen at its address. 0: no guess.
    [[gnu::always_inline]] uint64_t size(EventKind kind, uint64_t addr, uint64_t stack) const {
        if (kind == EventKind::alloc) return stack < by_stack_.size() ? by_stack_[stack].size : 0;
        const auto& [a, s] = size_at_[slot(addr)];
        return a == addr ? s : 0;
    }
    // The stack that followed the previous alloc's stack last time: loops repeat.
    [[gnu::always_inline]] uint64_t next_stack() const { return last_stack_ < by_stack_.size() ? by_stack_[last_stack_].next : 0; }
    // The caching allocator often hands out the block just freed with the same size.
    [[gnu::always_inline]] uint64_t alloc_address(uint64_t size) const {
        const auto& [s, a] = freed_by_size_[(size * 0x9E3779B97F4A7C15ull) >> (64 - 12)];
        return s == size ? a : 0;
    }
    // Frees mostly hit one of the last few allocations: its distance back, or -1.
    int recent_index(uint64_t addr) const {
        for (int j = 0; j < kRecent; ++j)
            if (recent_[(recent_pos_ - 1 - j) & (kRecent - 1)] == addr) return j;
        return -1;
    }
    [[gnu::always_inline]] uint64_t recent(int j) const { return recent_[(recent_pos_ - 1 - unsigned(j)) & (kRecent - 1)]; }

    // After every block event, with its file stack id (0 if none). False for a stack id too
    // large to be real (a reader checks ids against its definitions first).
    [[gnu::always_inline]] void update(EventKind kind, uint64_t addr, uint64_t size, uint64_t stack) {
        size_at_[slot(addr)] = {addr, size};
        if (kind == EventKind::alloc) {
            if (stack >= by_stack_.size()) [[unlikely]] by_stack_.resize(stack + 1);  // last_stack_ is below it
            by_stack_[stack].size = size;
            by_stack_[last_stack_].next = stack;
            last_stack_ = stack;
            recent_[recent_pos_++ & (kRecent - 1)] = addr;
        } else if (is_release(kind)) {
            freed_by_size_[(size * 0x9E3779B97F4A7C15ull) >> (64 - 12)] = {size, addr};
        }
    }

    static constexpr int kRecent = 16;

private:
    static size_t slot(uint64_t addr) { return size_t(((addr >> 9) * 0x9E3779B97F4A7C15ull) >> (64 - 16)); }

    std::vector<std::pair<uint64_t, uint64_t>> size_at_ = std::vector<std::pair<uint64_t, uint64_t>>(size_t(1) << 16);
    struct ByStack {
        uint64_t size = 0;  // of the last alloc at this stack
        uint64_t next = 0;  // the stack of the alloc after it
    };
    std::vector<ByStack> by_stack_;  // 0 beyond its end
    uint64_t last_stack_ = 0;
    std::vector<std::pair<uint64_t, uint64_t>> freed_by_size_ = std::vector<std::pair<uint64_t, uint64_t>>(size_t(1) << 12);
    std::array<uint64_t, kRecent> recent_{};
    unsigned recent_pos_ = 0;
};

}  // namespace vramscope::format
