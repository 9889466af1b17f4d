#include "common/block_ring.h"

#include <stdexcept>

namespace vramscope {

BlockRing::BlockRing(Produce produce, size_t block_bytes)
    : produce_(std::move(produce)), blocks_(kBlocks, Bytes(block_bytes)), filled_(kBlocks, 0) {
    worker_ = std::thread([this] { run(); });
}

BlockRing::~BlockRing() {
    {
        std::lock_guard lock(mutex_);
        cancel_ = true;
    }
    cv_.notify_all();
    worker_.join();
}

void BlockRing::run() {
    std::string error;
    for (size_t block = 0; !cancel_; ++block) {
        {
            // Wait for a free block: the caller is done with all but the last kBlocks - 1.
            std::unique_lock lock(mutex_);
            cv_.wait(lock, [&] { return cancel_ || block < taken_ - (holding_ ? 1 : 0) + kBlocks; });
            if (cancel_) break;
        }
        Bytes& out = blocks_[block % kBlocks];
        size_t n = 0;
        try {
            n = produce_(out.data(), out.size());
        } catch (const std::exception& e) {
            error = e.what();
        }
        if (n == 0) break;
        std::lock_guard lock(mutex_);
        filled_[block % kBlocks] = n;
        produced_ = block + 1;
        cv_.notify_all();
    }
    std::lock_guard lock(mutex_);
    done_ = true;
    error_ = std::move(error);
    cv_.notify_all();
}

bool BlockRing::next(std::string_view& chunk) {
    std::unique_lock lock(mutex_);
    holding_ = false;  // the previous block may be refilled now
    cv_.notify_all();
    cv_.wait(lock, [&] { return produced_ > taken_ || done_; });
    if (produced_ > taken_) {
        const size_t slot = taken_ % kBlocks;
        chunk = std::string_view(blocks_[slot].data(), filled_[slot]);
        ++taken_;
        holding_ = true;
        return true;
    }
    if (!error_.empty()) throw std::runtime_error(error_);
    return false;
}

}  // namespace vramscope
