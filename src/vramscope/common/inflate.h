// The deflate decoders GzipStream can run on its thread: zlib's, always built, and ISA-L's where
// it was found at build time (libisal-dev): three times zlib's speed on a snapshot here (0.13 s
// against 0.36 to 0.47 s for 455 MB), so the second core has room beside the parse.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace vramscope {

enum class Inflater : unsigned char { zlib, isal };

// ISA-L's where this build has it, zlib's otherwise.
Inflater fastest_inflater();
bool built_with(Inflater inflater);

// Inflates one buffer of gzip members, one after the other (concatenated members are valid
// gzip), checking each member's CRC-32 and length.
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
std::unique_ptr<Decoder> make_decoder(Inflater inflater, std::string_view gz);

// zlib's crc32(0, data, n), the .vscope chunks' checksum: ISA-L's where this build has it (about
// 3 % of a .vscope analysis with zlib's, under 1 % with ISA-L's).
uint32_t crc32_of(const uint8_t* data, size_t n);

}  // namespace vramscope
