// ISA-L's inflater (Intel's Intelligent Storage Acceleration Library, Debian's libisal-dev):
// built only where CMake found it.
#include <isa-l/crc.h>
#include <isa-l/igzip_lib.h>

#include <algorithm>

#include "common/inflate.h"

namespace vramscope {
namespace {

class IsalDecoder : public Decoder {
public:
    explicit IsalDecoder(std::string_view gz) : in_(gz) {
        start_member();
        state_.next_in = reinterpret_cast<uint8_t*>(const_cast<char*>(in_.data()));
        state_.avail_in = uint32_t(std::min<size_t>(in_.size(), UINT32_MAX));
    }

    size_t inflate(char* out, size_t capacity, std::string& error) override {
        state_.next_out = reinterpret_cast<uint8_t*>(out);
        state_.avail_out = uint32_t(std::min<size_t>(capacity, UINT32_MAX));
        const uint32_t asked = state_.avail_out;
        while (state_.avail_out > 0 && !ended_) {
            const uint32_t in_before = state_.avail_in, out_before = state_.avail_out;
            const int rc = isal_inflate(&state_);
            if (rc < 0) {
                error = why(rc);
                break;
            }
            if (state_.avail_in == 0 && consumed() < in_.size())
                state_.avail_in = uint32_t(std::min<size_t>(in_.size() - consumed(), UINT32_MAX));
            if (state_.block_state == ISAL_BLOCK_FINISH) {
                ++members_ended_;
                if (consumed() == in_.size()) ended_ = true;
                else start_member();
                continue;
            }
            if (state_.avail_in == in_before && state_.avail_out == out_before) {  // all input read, member open
                // Too few bytes after a member for a header: more likely junk than a cut member.
                error = members_ended_ && state_.total_out == 0 ? "bytes after the gzip member that are not gzip"
                                                                : "gzip data cut short";
                break;
            }
        }
        return asked - state_.avail_out;
    }
    size_t consumed() const override { return size_t(reinterpret_cast<const char*>(state_.next_in) - in_.data()); }

private:
    // The state of a fresh member, its input where the last one's ended and its output where
    // the last one's stopped (isal_inflate_init clears both).
    void start_member() {
        uint8_t* const next_in = state_.next_in;
        uint8_t* const next_out = state_.next_out;
        const uint32_t avail_in = state_.avail_in, avail_out = state_.avail_out;
        isal_inflate_init(&state_);
        state_.crc_flag = ISAL_GZIP;  // the header parsed, the trailer's CRC-32 and length checked
        state_.next_in = next_in, state_.avail_in = avail_in;
        state_.next_out = next_out, state_.avail_out = avail_out;
    }
    static const char* why(int rc) {
        switch (rc) {
        case ISAL_INVALID_WRAPPER: return "not gzip data (bad header)";
        case ISAL_UNSUPPORTED_METHOD: return "unknown compression method";
        case ISAL_INCORRECT_CHECKSUM: return "incorrect data check (CRC-32 or length)";
        default: return "corrupt gzip data";
        }
    }

    std::string_view in_;
    inflate_state state_{};
    size_t members_ended_ = 0;
};

}  // namespace

std::unique_ptr<Decoder> make_isal_decoder(std::string_view gz) { return std::make_unique<IsalDecoder>(gz); }

uint32_t isal_crc32(const uint8_t* data, size_t n) { return crc32_gzip_refl(0, data, n); }

}  // namespace vramscope
