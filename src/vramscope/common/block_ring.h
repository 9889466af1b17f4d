// Input made on a second thread (inflated, read from a file) into a few recycled blocks, while
// the caller parses the blocks already filled: making it costs the caller almost nothing, and
// memory stays at a few MiB however large the input.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/chunk_source.h"

namespace vramscope {

class BlockRing : public ChunkSource {
public:
    // Fills `out` with up to `capacity` bytes and returns how many; 0 at the end. What it throws
    // (std::runtime_error) next() throws in the caller's thread, once the blocks before are read.
    using Produce = std::function<size_t(char* out, size_t capacity)>;

    explicit BlockRing(Produce produce, size_t block_bytes = 1 << 20);
    ~BlockRing() override;  // stops the producer, whatever it was doing
    BlockRing(const BlockRing&) = delete;
    BlockRing& operator=(const BlockRing&) = delete;

    bool next(std::string_view& chunk) override;

private:
    void run();

    static constexpr size_t kBlocks = 4;
    Produce produce_;
    std::vector<Bytes> blocks_;  // never zeroed: each is filled before it is read
    std::vector<size_t> filled_;
    std::mutex mutex_;
    std::condition_variable cv_;
    size_t produced_ = 0;   // blocks filled so far
    size_t taken_ = 0;      // blocks handed to the caller
    bool holding_ = false;  // the caller still reads block taken_ - 1
    bool done_ = false;
    std::string error_;
    std::atomic<bool> cancel_{false};
    std::thread worker_;  // last: started once everything it uses exists
};

}  // namespace vramscope
