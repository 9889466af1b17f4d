#include "common/inflate.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace vramscope {

#ifdef VRAMSCOPE_HAVE_ISAL
std::unique_ptr<Decoder> make_isal_decoder(std::unique_ptr<GzipInput> gz);  // inflate_isal.cpp
uint32_t isal_crc32(const uint8_t* data, size_t n);               // inflate_isal.cpp
constexpr bool kHaveIsal = true;
#else
constexpr bool kHaveIsal = false;
#endif

std::string_view GzipInput::from(const char* next) {
    const size_t used = next ? size_t(next - data_) : 0;
    if (read_ && !read_all_ && size_ - used < kLookahead) {
        std::memmove(window_.data(), data_ + used, size_ - used);
        base_ += used;
        size_ -= used;
        const size_t n = read_(window_.data() + size_, window_.size() - size_);
        read_all_ = n < window_.size() - size_;
        size_ += n;
        return {window_.data(), size_};
    }
    return {data_ + used, size_ - used};
}

namespace {

class ZlibDecoder : public Decoder {
public:
    explicit ZlibDecoder(std::unique_ptr<GzipInput> gz) : in_(std::move(gz)) {
        if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) throw std::runtime_error("cannot start gzip decoder");
        feed(in_->from(nullptr));
    }
    ~ZlibDecoder() override { inflateEnd(&z_); }

    size_t inflate(char* out, size_t capacity, std::string& error) override {
        z_.next_out = reinterpret_cast<Bytef*>(out);
        z_.avail_out = uInt(capacity);
        while (z_.avail_out > 0 && !ended_) {
            feed(in_->from(next_in()));
            const int rc = ::inflate(&z_, Z_NO_FLUSH);
            if (rc == Z_STREAM_END) {
                feed(in_->from(next_in()));
                if (z_.avail_in == 0) ended_ = true;
                else inflateReset(&z_);  // the next member
                continue;
            }
            if (rc == Z_OK || (rc == Z_BUF_ERROR && z_.avail_out == 0)) continue;
            error = rc == Z_BUF_ERROR ? std::string("gzip data cut short") : std::string(z_.msg ? z_.msg : "corrupt gzip data");
            break;
        }
        return capacity - z_.avail_out;
    }
    size_t consumed() const override { return size_t(in_->offset(next_in())); }

private:
    const char* next_in() const { return reinterpret_cast<const char*>(z_.next_in); }
    void feed(std::string_view rest) {
        z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(rest.data()));
        z_.avail_in = uInt(std::min<size_t>(rest.size(), 0x7fffffff));
    }

    std::unique_ptr<GzipInput> in_;
    z_stream z_{};
};

}  // namespace

bool built_with(Inflater inflater) { return inflater == Inflater::zlib || kHaveIsal; }

Inflater fastest_inflater() { return built_with(Inflater::isal) ? Inflater::isal : Inflater::zlib; }

uint32_t crc32_of(const uint8_t* data, size_t n) {
#ifdef VRAMSCOPE_HAVE_ISAL
    return isal_crc32(data, n);
#else
    return uint32_t(crc32_z(0, data, n));
#endif
}

std::unique_ptr<Decoder> make_decoder(Inflater inflater, std::unique_ptr<GzipInput> gz) {
    if (!built_with(inflater)) throw std::invalid_argument("this build has no ISA-L inflater");
#ifdef VRAMSCOPE_HAVE_ISAL
    if (inflater == Inflater::isal) return make_isal_decoder(std::move(gz));
#endif
    return std::make_unique<ZlibDecoder>(std::move(gz));
}

}  // namespace vramscope
