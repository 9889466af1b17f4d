#include "common/gzip_stream.h"

#include "common/progress.h"

#include <zlib.h>

#include <stdexcept>

namespace vramscope {

GzipStream::GzipStream(std::string_view gz, std::string name, uint64_t max_decoded)
    : in_(gz), name_(std::move(name)), max_decoded_(max_decoded) {
    for (auto& b : blocks_) b.resize(kBlockBytes);
    worker_ = std::thread([this] { inflate_all(); });
}

GzipStream::~GzipStream() {
    cancel_ = true;
    cv_.notify_all();
    worker_.join();
}

void GzipStream::inflate_all() {
    z_stream z{};
    std::string error;
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) {
        error = name_ + ": cannot start gzip decoder";
    } else {
        z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in_.data()));
        z.avail_in = uInt(std::min<size_t>(in_.size(), 0x7fffffff));
        bool end = false;
        uint64_t decoded = 0;
        for (size_t block = 0; !end && !cancel_; ++block) {
            {
                // Wait for a free block: the consumer is done with all but the last kBlocks - 1.
                std::unique_lock lock(mutex_);
                cv_.wait(lock, [&] { return cancel_ || block < taken_ - (holding_ ? 1 : 0) + kBlocks; });
                if (cancel_) break;
            }
            std::vector<char>& out = blocks_[block % kBlocks];
            z.next_out = reinterpret_cast<Bytef*>(out.data());
            z.avail_out = uInt(out.size());
            while (z.avail_out > 0) {
                const int rc = inflate(&z, Z_NO_FLUSH);
                const size_t consumed = size_t(reinterpret_cast<const char*>(z.next_in) - in_.data());
                if (z.avail_in == 0 && consumed < in_.size()) z.avail_in = uInt(std::min<size_t>(in_.size() - consumed, 0x7fffffff));
                if (rc == Z_STREAM_END) {
                    if (consumed == in_.size()) {
                        end = true;
                        break;
                    }
                    inflateReset(&z);  // concatenated gzip members are valid gzip
                    continue;
                }
                if (rc == Z_OK || (rc == Z_BUF_ERROR && z.avail_out == 0)) continue;
                error = name_ + ": offset " + std::to_string(consumed) + ": " +
                        (rc == Z_BUF_ERROR ? std::string("gzip data cut short") : std::string(z.msg ? z.msg : "corrupt gzip data"));
                end = true;
                break;
            }
            decoded += out.size() - z.avail_out;  // total_out restarts with each member
            if (decoded > max_decoded_ && error.empty()) {
                error = name_ + ": offset " + std::to_string(reinterpret_cast<const char*>(z.next_in) - in_.data()) +
                        ": gzip data inflates to more than " + std::to_string(max_decoded_) +
                        " bytes (the limit; --max-decoded raises it)";
                end = true;
            }
            Progress::report(size_t(reinterpret_cast<const char*>(z.next_in) - in_.data()));
            std::lock_guard lock(mutex_);
            filled_[block % kBlocks] = out.size() - z.avail_out;
            produced_ = block + 1;
            cv_.notify_all();
        }
        inflateEnd(&z);
    }
    std::lock_guard lock(mutex_);
    done_ = true;
    error_ = std::move(error);
    cv_.notify_all();
}

bool GzipStream::next(std::string_view& chunk) {
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

uint64_t GzipStream::expected_bytes() const {
    if (in_.size() < 18) return 0;  // a header and a trailer at least
    const auto* t = reinterpret_cast<const uint8_t*>(in_.data() + in_.size() - 4);
    return uint64_t(t[0]) | uint64_t(t[1]) << 8 | uint64_t(t[2]) << 16 | uint64_t(t[3]) << 24;
}

Bytes gunzip(std::string_view gz, const std::string& name, uint64_t max_decoded) {
    GzipStream stream(gz, name, max_decoded);
    Bytes out;
    std::string_view chunk;
    while (stream.next(chunk)) out.insert(out.end(), chunk.begin(), chunk.end());
    return out;
}

}  // namespace vramscope
