#include "common/gzip_stream.h"

#include "common/progress.h"

#include <zlib.h>

#include <stdexcept>

namespace vramscope {

struct GzipStream::Inflater {
    z_stream z{};
    bool started = false, ended = false;
    uint64_t decoded = 0;
    std::string error;  // met after a block's first bytes: thrown at the next call, after them
    ~Inflater() {
        if (started) inflateEnd(&z);
    }
};

GzipStream::GzipStream(std::string_view gz, std::string name, uint64_t max_decoded)
    : in_(gz), name_(std::move(name)), max_decoded_(max_decoded), inflater_(std::make_unique<Inflater>()),
      ring_([this](char* out, size_t capacity) { return inflate_into(out, capacity); }) {}

GzipStream::~GzipStream() = default;

size_t GzipStream::inflate_into(char* out, size_t capacity) {
    Inflater& f = *inflater_;
    z_stream& z = f.z;
    if (!f.error.empty()) throw std::runtime_error(f.error);
    if (f.ended) return 0;
    if (!f.started) {
        if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw std::runtime_error(name_ + ": cannot start gzip decoder");
        f.started = true;
        z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in_.data()));
        z.avail_in = uInt(std::min<size_t>(in_.size(), 0x7fffffff));
    }
    z.next_out = reinterpret_cast<Bytef*>(out);
    z.avail_out = uInt(capacity);
    std::string error;
    while (z.avail_out > 0) {
        const int rc = inflate(&z, Z_NO_FLUSH);
        const size_t consumed = size_t(reinterpret_cast<const char*>(z.next_in) - in_.data());
        if (z.avail_in == 0 && consumed < in_.size()) z.avail_in = uInt(std::min<size_t>(in_.size() - consumed, 0x7fffffff));
        if (rc == Z_STREAM_END) {
            if (consumed == in_.size()) {
                f.ended = true;
                break;
            }
            inflateReset(&z);  // concatenated gzip members are valid gzip
            continue;
        }
        if (rc == Z_OK || (rc == Z_BUF_ERROR && z.avail_out == 0)) continue;
        error = name_ + ": offset " + std::to_string(consumed) + ": " +
                (rc == Z_BUF_ERROR ? std::string("gzip data cut short") : std::string(z.msg ? z.msg : "corrupt gzip data"));
        break;
    }
    const size_t n = capacity - z.avail_out;
    f.decoded += n;  // total_out restarts with each member
    if (f.decoded > max_decoded_ && error.empty())
        error = name_ + ": offset " + std::to_string(reinterpret_cast<const char*>(z.next_in) - in_.data()) +
                ": gzip data inflates to more than " + std::to_string(max_decoded_) +
                " bytes (the limit; --max-decoded raises it)";
    Progress::report(size_t(reinterpret_cast<const char*>(z.next_in) - in_.data()));
    if (!error.empty()) {
        if (n == 0) throw std::runtime_error(error);
        f.error = std::move(error);
    }
    return n;
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
