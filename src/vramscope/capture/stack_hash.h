// How a hook thread knows a Python stack again without its frames' copy: two independent 64-bit
// hashes of the walk, its depth and its autograd node (Recorder's thread cache compares these;
// the shared stack table compares the frames themselves). Two different stacks that agree on all
// of them have odds below 2^-64 per lookup.
//
// The walk and this are most of what an allocation with a known stack costs, so a frame is one
// value, its instruction pointer (which names its code and offset while the code lives: live code
// objects do not overlap), and each chain is a rotate and an xor a frame (a multiply on the chain
// made it one long wait). `hash` xors each frame in as it is: a linear map, whose colliding pairs
// are structured (two frames' differences that cancel). `check` xors in each frame multiplied
// first, a product off the chain, so that no such structure carries over to both.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>

namespace vramscope::capture {

struct StackKey {
    uint64_t hash = 0, check = 0;
    uint32_t frames = 0;
};

class StackHasher {
public:
    void add(const void* instruction) {
        const uint64_t at = uint64_t(reinterpret_cast<uintptr_t>(instruction));
        hash_ = std::rotl(hash_, 17) ^ at;
        const uint64_t f = at * 0x9FB21C651E98DF25ull;
        check_ = std::rotl(check_, 29) ^ f ^ (f >> 32);
        ++frames_;
    }
    uint32_t frames() const { return frames_; }
    StackKey key(const char* node) const {
        const uint64_t n = uint64_t(reinterpret_cast<uintptr_t>(node));
        return {mix(hash_ ^ n), mix(check_ ^ std::rotl(n, 32) ^ frames_), frames_};
    }

private:
    static uint64_t mix(uint64_t h) {
        h = (h ^ (h >> 31)) * 0xFF51AFD7ED558CCDull;
        h = (h ^ (h >> 29)) * 0xC4CEB9FE1A85EC53ull;
        return h ^ (h >> 32);
    }
    uint64_t hash_ = 0x9E3779B97F4A7C15ull, check_ = 0xC2B2AE3D27D4EB4Full;
    uint32_t frames_ = 0;
};

}  // namespace vramscope::capture
