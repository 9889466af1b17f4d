// The hook path's own parts: the queue that carries one thread's events to the drain, and the key
// a thread knows a stack again by.
#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "capture/chunk_queue.h"
#include "capture/stack_hash.h"

using namespace vramscope::capture;

TEST(ChunkQueue, EveryItemArrivesInOrderAcrossChunksWhateverWhenTheReaderTakes) {
    ChunkQueue<uint64_t, 8> q;
    ChunkQueue<uint64_t, 8>::Writer w(q);
    std::vector<uint64_t> got;
    uint64_t next = 0;
    for (int round = 0; round < 200; ++round) {
        for (int k = 0; k < round % 23; ++k) w.push(next++);  // 0 to 22 items: inside a chunk, at its end, past it
        q.take(got);
    }
    q.take(got);
    ASSERT_EQ(got.size(), next);
    for (uint64_t i = 0; i < next; ++i) ASSERT_EQ(got[i], i);
}

TEST(ChunkQueue, AReaderOnAnotherThreadLosesNothingWhileTheWriterRunsAhead) {
    constexpr uint64_t kItems = 2'000'000;
    ChunkQueue<uint64_t, 64> q;
    ChunkQueue<uint64_t, 64>::Writer w(q);
    std::thread writer([&] {
        for (uint64_t i = 0; i < kItems; ++i) w.push(i);
    });
    std::vector<uint64_t> got;
    while (got.size() < kItems) q.take(got);  // chunks emptied go back to the writer meanwhile
    writer.join();
    q.take(got);
    ASSERT_EQ(got.size(), kItems);
    for (uint64_t i = 0; i < kItems; ++i) ASSERT_EQ(got[i], i) << "at " << i;
}

namespace {
StackKey key_of(const std::vector<uintptr_t>& instructions, const char* node = nullptr) {
    StackHasher h;
    for (uintptr_t at : instructions) h.add(reinterpret_cast<const void*>(at));
    return h.key(node);
}
}  // namespace

TEST(StackHash, TwoStacksWhoseDifferencesCancelInTheLinearHashDifferInItsCheck) {
    // `hash` rotates by 17 a frame, so frames four apart meet rotated by 68 = 4 bits: an
    // instruction differing in bit 1 at one and in bit 5 at the other cancel out exactly.
    const uintptr_t code = 0x7f00'1234'5000;
    std::vector<uintptr_t> a, b;
    for (int i = 0; i < 8; ++i) a.push_back(code + 0x100 * i + 40 + 2 * i);
    b = a;
    b[1] ^= 2;
    b[5] ^= 32;
    const StackKey ka = key_of(a), kb = key_of(b);
    EXPECT_EQ(ka.hash, kb.hash);  // the structure the check is there for
    EXPECT_NE(ka.check, kb.check);
}

TEST(StackHash, DepthAndNodeArePartOfTheKey) {
    const std::vector<uintptr_t> one{0x1008}, two{0x1008, 0x2010};
    EXPECT_NE(key_of(one).check, key_of(two).check);
    EXPECT_EQ(key_of(two).frames, 2u);
    static const char mm[] = "MmBackward0", add[] = "AddBackward0";
    EXPECT_NE(key_of(one, mm).hash, key_of(one, add).hash);
    EXPECT_NE(key_of(one, mm).check, key_of(one, nullptr).check);
}
