#include "common/gzip_stream.h"

#include "common/progress.h"

#include <stdexcept>

namespace vramscope {

GzipStream::GzipStream(std::string_view gz, std::string name, uint64_t max_decoded, Inflater inflater)
    : in_(gz), name_(std::move(name)), max_decoded_(max_decoded), inflater_(inflater),
      ring_([this](char* out, size_t capacity) { return inflate_into(out, capacity); }) {}

GzipStream::~GzipStream() = default;

size_t GzipStream::inflate_into(char* out, size_t capacity) {
    if (!error_.empty()) throw std::runtime_error(error_);
    if (!decoder_) {
        try {
            decoder_ = make_decoder(inflater_, in_);
        } catch (const std::exception& e) {
            throw std::runtime_error(name_ + ": " + e.what());
        }
    }
    if (decoder_->ended()) return 0;
    std::string why;
    const size_t n = decoder_->inflate(out, capacity, why);
    decoded_ += n;
    if (decoded_ > max_decoded_ && why.empty())
        why = "gzip data inflates to more than " + std::to_string(max_decoded_) + " bytes (the limit; --max-decoded raises it)";
    Progress::report(decoder_->consumed());
    if (!why.empty()) {
        // Met after this block's first bytes: thrown at the next call, once they are read.
        error_ = name_ + ": offset " + std::to_string(decoder_->consumed()) + ": " + why;
        if (n == 0) throw std::runtime_error(error_);
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
