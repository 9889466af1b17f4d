#include "common/gzip_stream.h"

#include <zlib.h>

#include <cstring>

namespace vramscope {

GzipStream::GzipStream(std::string_view gz, std::string name) : in_(gz), name_(std::move(name)) {
    uint32_t isize = 0;
    if (in_.size() >= 18) std::memcpy(&isize, in_.data() + in_.size() - 4, 4);
    out_.resize(size_t(isize) + 1);  // +1: a byte beyond ISIZE proves the announcement wrong
    worker_ = std::thread([this] { inflate_all(); });
}

GzipStream::~GzipStream() {
    cancel_ = true;
    worker_.join();
}

void GzipStream::inflate_all() {
    z_stream z{};
    std::string error;
    bool overflow = false;
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) {
        error = name_ + ": cannot start gzip decoder";
    } else {
        z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in_.data()));
        z.avail_in = uInt(std::min<size_t>(in_.size(), 0x7fffffff));
        size_t produced = 0;
        constexpr size_t kStep = 1 << 20;  // publish progress every MiB
        while (!cancel_) {
            const size_t room = out_.size() - produced;
            if (room == 0) {
                overflow = true;
                break;
            }
            z.next_out = reinterpret_cast<Bytef*>(out_.data() + produced);
            z.avail_out = uInt(std::min(room, kStep));
            const int rc = inflate(&z, Z_NO_FLUSH);
            produced = size_t(reinterpret_cast<char*>(z.next_out) - out_.data());
            const size_t consumed = size_t(reinterpret_cast<const char*>(z.next_in) - in_.data());
            if (z.avail_in == 0 && consumed < in_.size()) z.avail_in = uInt(std::min<size_t>(in_.size() - consumed, 0x7fffffff));
            {
                std::lock_guard lock(mutex_);
                produced_ = produced;
            }
            cv_.notify_all();
            if (rc == Z_STREAM_END) {
                if (consumed < in_.size()) overflow = true;  // another member follows: not worth streaming
                break;
            }
            if (rc == Z_OK || (rc == Z_BUF_ERROR && z.avail_out == 0)) continue;
            const size_t at = size_t(reinterpret_cast<const char*>(z.next_in) - in_.data());
            error = name_ + ": offset " + std::to_string(at) + ": " +
                    (rc == Z_BUF_ERROR ? std::string("gzip data cut short") : std::string(z.msg ? z.msg : "corrupt gzip data"));
            break;
        }
        inflateEnd(&z);
    }
    std::lock_guard lock(mutex_);
    done_ = true;
    overflow_ = overflow;
    error_ = std::move(error);
    cv_.notify_all();
}

size_t GzipStream::wait(size_t need) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return produced_ >= need || done_; });
    if (produced_ >= need) return produced_;
    if (overflow_) throw Overflow(name_ + ": gzip output larger than its trailer says");
    if (!error_.empty()) throw std::runtime_error(error_);
    return produced_;
}

}  // namespace vramscope
