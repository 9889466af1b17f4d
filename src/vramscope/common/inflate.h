// The deflate decoders GzipStream can run on its thread: zlib's, always built, and ISA-L's where
// it was found at build time (libisal-dev): three times zlib's speed on a snapshot here (0.13 s
// against 0.36 to 0.47 s for 455 MB), so the second core has room beside the parse.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/file.h"

namespace vramscope {

enum class Inflater : unsigned char { zlib, isal };

// ISA-L's where this build has it, zlib's otherwise.
Inflater fastest_inflater();
bool built_with(Inflater inflater);

// Up to `capacity` bytes of compressed input into `out`; fewer only at its end (FileChunks::read_into).
using ReadInput = std::function<size_t(char* out, size_t capacity)>;

// The compressed bytes a decoder reads: a buffer whole in memory, or input read into a window of
// a few MiB. The window is topped up before less than one decoder call's worth is left in it, so
// a decoder meets the input's end only where the input ends: ISA-L's output before an error
// depends on where its input ran out, and the offsets and bytes before an error are those of the
// whole buffer, wherever the reads stopped.
class GzipInput {
public:
    explicit GzipInput(std::string_view whole) : data_(whole.data()), size_(whole.size()) {}
    explicit GzipInput(ReadInput read) : read_(std::move(read)), window_(kWindow), data_(window_.data()) {}
    GzipInput(const GzipInput&) = delete;
    GzipInput& operator=(const GzipInput&) = delete;

    // The bytes from `next` on (a pointer into what the last call gave; nullptr: the start): a
    // window moves them to its start first and reads more when fewer than kLookahead remain.
    std::string_view from(const char* next);
    uint64_t offset(const char* next) const { return base_ + uint64_t(next - data_); }

private:
    // One decoder call takes under 1.2 MiB: a ring block of 1 MiB out, and the 64 KiB a decoder
    // holds back, at 9 bytes in for 8 out (incompressible data); only a crafted run of empty
    // deflate blocks takes more.
    static constexpr size_t kLookahead = 3 << 19, kWindow = 4 << 20;
    ReadInput read_;
    Bytes window_;
    const char* data_;      // the buffer, or window_
    size_t size_ = 0;       // bytes at data_
    uint64_t base_ = 0;     // the input's offset of data_[0]
    bool read_all_ = false;  // read_ gave its last bytes
};

// Inflates gzip members, one after the other (concatenated members are valid gzip), checking
// each member's CRC-32 and length.
class Decoder {
public:
    virtual ~Decoder() = default;
    // Up to `capacity` bytes into `out`; how many. At the end of the last member, ended() turns
    // true. On bad or cut data sets `error` (what is wrong, without a name or offset) and
    // returns what was inflated before it.
    virtual size_t inflate(char* out, size_t capacity, std::string& error) = 0;
    virtual size_t consumed() const = 0;  // input bytes read so far
    bool ended() const { return ended_; }

protected:
    bool ended_ = false;
};

// Throws std::invalid_argument for an inflater this build does not have.
std::unique_ptr<Decoder> make_decoder(Inflater inflater, std::unique_ptr<GzipInput> gz);

// zlib's crc32(0, data, n), the .vscope chunks' checksum: ISA-L's where this build has it (about
// 3 % of a .vscope analysis with zlib's, under 1 % with ISA-L's).
uint32_t crc32_of(const uint8_t* data, size_t n);

}  // namespace vramscope
