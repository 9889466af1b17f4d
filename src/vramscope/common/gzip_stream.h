// Inflates a gzip buffer on a second thread while the caller already parses the front of it:
// for a large snapshot, decompression then costs almost nothing on top of parsing.
#pragma once
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

#include "common/file.h"

namespace vramscope {

// Lets a parser wait for bytes that are still being produced.
class GrowingInput {
public:
    virtual ~GrowingInput() = default;
    // Blocks until at least `need` bytes from the start exist or the input is complete; returns
    // how many exist. Throws what the producer failed with.
    virtual size_t wait(size_t need) = 0;
};

class GzipStream : public GrowingInput {
public:
    // The output did not fit the size the gzip trailer announced (several members, or > 4 GiB):
    // the caller starts over with plain gunzip().
    struct Overflow : std::runtime_error {
        using std::runtime_error::runtime_error;
    };

    GzipStream(std::string_view gz, std::string name);
    ~GzipStream() override;

    size_t wait(size_t need) override;
    const char* data() const { return out_.data(); }
    size_t size_hint() const { return out_.size(); }  // what the gzip trailer announced

private:
    void inflate_all();

    std::string_view in_;
    std::string name_;
    Bytes out_;
    std::mutex mutex_;
    std::condition_variable cv_;
    size_t produced_ = 0;
    bool done_ = false, overflow_ = false;
    std::string error_;
    std::atomic<bool> cancel_{false};
    std::thread worker_;
};

}  // namespace vramscope
