// The hook path's own parts: the queue that carries one thread's events to the drain, and the key
// a thread knows a stack again by.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "capture/chunk_queue.h"
#include "capture/stack_hash.h"
#include "capture/thread_table.h"

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

namespace {
struct Counted {
    int made;
};
}  // namespace

TEST(ThreadTable, EachThreadFindsItsOwnStateEvenWhenItsBucketIsFull) {
    using Table = ThreadTable<Counted>;
    Table table;
    std::vector<uintptr_t> same_bucket;  // more threads than a bucket has ways, all in one bucket
    for (uintptr_t me = 0x7f00'0000'1000; same_bucket.size() < Table::kWays + 2; me += 0x80'0000)
        if (Table::bucket_of(me) == Table::bucket_of(0x7f00'0000'1000)) same_bucket.push_back(me);
    int made = 0;
    auto make = [&] { return std::make_unique<Counted>(Counted{++made}); };
    std::vector<Counted*> states;
    for (uintptr_t me : same_bucket) {
        EXPECT_EQ(table.find(me), nullptr);
        states.push_back(table.join(me, make));
    }
    for (size_t i = 0; i < same_bucket.size(); ++i) {
        const uintptr_t me = same_bucket[i];
        EXPECT_EQ(table.find(me), i < Table::kWays ? states[i] : nullptr) << "thread " << i;
        EXPECT_EQ(table.join(me, make), states[i]) << "thread " << i;  // the overflow's way in
        EXPECT_EQ(states[i]->made, int(i) + 1);
    }
    EXPECT_EQ(made, int(same_bucket.size()));  // nobody's state made twice
}

TEST(ThreadTable, LiveThreadsHaveDistinctThreadPointersAndTheirOwnStates) {
    ThreadTable<Counted> table;
    constexpr int kThreads = 16;
    std::vector<uintptr_t> pointers(kThreads);
    std::vector<Counted*> states(kThreads);
    std::atomic<int> arrived{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i)
        threads.emplace_back([&, i] {
            pointers[i] = thread_pointer();
            states[i] = table.join(pointers[i], [i] { return std::make_unique<Counted>(Counted{i}); });
            ++arrived;
            while (arrived < kThreads) std::this_thread::yield();  // all alive at once
            EXPECT_EQ(thread_pointer(), pointers[i]);
            Counted* found = table.find(thread_pointer());
            if (found) EXPECT_EQ(found, states[i]);
            EXPECT_EQ(table.join(thread_pointer(), [] { return std::make_unique<Counted>(Counted{-1}); })->made, i);
        });
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(std::set<uintptr_t>(pointers.begin(), pointers.end()).size(), size_t(kThreads));
}
