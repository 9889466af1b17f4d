#include "common/gzip_stream.h"

#include <zlib.h>

#include <stdexcept>

#include "common/progress.h"

namespace vramscope {

namespace {
// The gzip trailer's length, of input of `size` bytes ending with `last4`: 0 if too short.
uint64_t trailer_length(uint64_t size, std::string_view last4) {
    if (size < 18 || last4.size() != 4) return 0;  // a header and a trailer at least
    const auto* t = reinterpret_cast<const uint8_t*>(last4.data());
    return uint64_t(t[0]) | uint64_t(t[1]) << 8 | uint64_t(t[2]) << 16 | uint64_t(t[3]) << 24;
}
}  // namespace

GzipStream::GzipStream(std::string_view gz, std::string name, uint64_t max_decoded, Inflater inflater)
    : in_(gz), name_(std::move(name)), max_decoded_(max_decoded),
      expected_bytes_(trailer_length(gz.size(), gz.substr(gz.size() - std::min<size_t>(gz.size(), 4)))),
      inflater_(inflater), ring_([this](char* out, size_t capacity) { return inflate_into(out, capacity); }) {}

GzipStream::GzipStream(std::unique_ptr<FileChunks> file, std::string name, uint64_t max_decoded, Inflater inflater)
    : file_(std::move(file)), name_(std::move(name)), max_decoded_(max_decoded),
      expected_bytes_(trailer_length(file_->size(), file_->last_bytes(4))), inflater_(inflater),
      ring_([this](char* out, size_t capacity) { return inflate_into(out, capacity); }) {}

GzipStream::~GzipStream() = default;

size_t GzipStream::inflate_into(char* out, size_t capacity) {
    if (!error_.empty()) throw std::runtime_error(error_);
    if (!decoder_) {
        auto input = file_ ? std::make_unique<GzipInput>([this](char* to, size_t n) { return file_->read_into(to, n); })
                           : std::make_unique<GzipInput>(in_);
        try {
            decoder_ = make_decoder(inflater_, std::move(input));
        } catch (const std::invalid_argument& e) {
            throw std::runtime_error(name_ + ": " + e.what());
        }
    }
    if (decoder_->ended()) return 0;
    std::string why;
    const size_t n = decoder_->inflate(out, capacity, why);
    decoded_ += n;
    if (decoded_ > max_decoded_ && why.empty())
        why = "gzip data inflates to more than " + std::to_string(max_decoded_) + " bytes (the limit; --max-decoded raises it)";
    if (!file_) Progress::report(decoder_->consumed());  // a file's reads report themselves
    if (!why.empty()) {
        // Met after this block's first bytes: thrown at the next call, once they are read.
        error_ = name_ + ": offset " + std::to_string(decoder_->consumed()) + ": " + why;
        if (n == 0) throw std::runtime_error(error_);
    }
    return n;
}

Bytes gunzip(std::string_view gz, const std::string& name, uint64_t max_decoded) {
    GzipStream stream(gz, name, max_decoded);
    return read_all(stream);
}

std::string gunzip_prefix(ChunkSource& gz, size_t n) {
    std::string out(n, '\0');
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return {};
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = uInt(n);
    std::string_view chunk;
    int rc = Z_OK;
    // zlib goes on past a full output while no byte is due (a block's end, the next header):
    // more input is given while it takes all it has, as one buffer of the whole would.
    while ((rc == Z_OK || rc == Z_BUF_ERROR) && z.avail_in == 0 && gz.next(chunk)) {
        z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(chunk.data()));
        z.avail_in = uInt(std::min<size_t>(chunk.size(), 0x7fffffff));
        rc = inflate(&z, Z_SYNC_FLUSH);
    }
    out.resize(rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR ? n - z.avail_out : 0);
    inflateEnd(&z);
    return out;
}

std::string gunzip_prefix(std::string_view gz, size_t n) {
    FixedChunks whole(gz, 0);
    return gunzip_prefix(whole, n);
}

}  // namespace vramscope
