// Inflates a gzip buffer on a second thread into a few recycled blocks, while the caller parses
// the blocks already filled: decompression costs almost nothing on top of parsing, and memory
// stays at a few MiB however large the snapshot.
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/chunk_source.h"
#include "common/file.h"

namespace vramscope {

// The whole gzip'd content at once (through a GzipStream). Throws std::runtime_error
// ("NAME: offset N: ...") on corrupt or cut gzip data, a bad CRC or length, trailing bytes that
// are not gzip, or content over max_decoded bytes.
Bytes gunzip(std::string_view gz, const std::string& name, uint64_t max_decoded = UINT64_MAX);

// zlib checks each member's CRC-32 and length at its end: read a stream to its end (next()
// returning false) for them to have been checked.
class GzipStream : public ChunkSource {
public:
    GzipStream(std::string_view gz, std::string name, uint64_t max_decoded = UINT64_MAX);
    ~GzipStream() override;

    bool next(std::string_view& chunk) override;
    // The gzip trailer's length of the last member: exact for one member under 4 GiB.
    uint64_t expected_bytes() const override;

private:
    void inflate_all();

    static constexpr size_t kBlockBytes = 1 << 20;
    static constexpr size_t kBlocks = 4;

    std::string_view in_;
    std::string name_;
    uint64_t max_decoded_;
    std::array<std::vector<char>, kBlocks> blocks_;
    std::array<size_t, kBlocks> filled_{};
    std::mutex mutex_;
    std::condition_variable cv_;
    size_t produced_ = 0;  // blocks filled so far
    size_t taken_ = 0;     // blocks handed to the consumer
    bool holding_ = false; // the consumer still reads block taken_ - 1
    bool done_ = false;
    std::string error_;
    std::atomic<bool> cancel_{false};
    std::thread worker_;
};

}  // namespace vramscope
