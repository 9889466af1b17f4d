#include "common/inflate.h"

#include <zlib.h>

#include <algorithm>
#include <stdexcept>

namespace vramscope {

#ifdef VRAMSCOPE_HAVE_ISAL
std::unique_ptr<Decoder> make_isal_decoder(std::string_view gz);  // inflate_isal.cpp
uint32_t isal_crc32(const uint8_t* data, size_t n);               // inflate_isal.cpp
constexpr bool kHaveIsal = true;
#else
constexpr bool kHaveIsal = false;
#endif

namespace {

class ZlibDecoder : public Decoder {
public:
    explicit ZlibDecoder(std::string_view gz) : in_(gz) {
        if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) throw std::runtime_error("cannot start gzip decoder");
        z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in_.data()));
        z_.avail_in = uInt(std::min<size_t>(in_.size(), 0x7fffffff));
    }
    ~ZlibDecoder() override { inflateEnd(&z_); }

    size_t inflate(char* out, size_t capacity, std::string& error) override {
        z_.next_out = reinterpret_cast<Bytef*>(out);
        z_.avail_out = uInt(capacity);
        while (z_.avail_out > 0 && !ended_) {
            const int rc = ::inflate(&z_, Z_NO_FLUSH);
            if (z_.avail_in == 0 && consumed() < in_.size()) z_.avail_in = uInt(std::min<size_t>(in_.size() - consumed(), 0x7fffffff));
            if (rc == Z_STREAM_END) {
                if (consumed() == in_.size()) ended_ = true;
                else inflateReset(&z_);  // the next member
                continue;
            }
            if (rc == Z_OK || (rc == Z_BUF_ERROR && z_.avail_out == 0)) continue;
            error = rc == Z_BUF_ERROR ? std::string("gzip data cut short") : std::string(z_.msg ? z_.msg : "corrupt gzip data");
            break;
        }
        return capacity - z_.avail_out;
    }
    size_t consumed() const override { return size_t(reinterpret_cast<const char*>(z_.next_in) - in_.data()); }

private:
    std::string_view in_;
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

std::unique_ptr<Decoder> make_decoder(Inflater inflater, std::string_view gz) {
    if (!built_with(inflater)) throw std::invalid_argument("this build has no ISA-L inflater");
#ifdef VRAMSCOPE_HAVE_ISAL
    if (inflater == Inflater::isal) return make_isal_decoder(gz);
#endif
    return std::make_unique<ZlibDecoder>(gz);
}

}  // namespace vramscope
