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
    explicit IsalDecoder(std::unique_ptr<GzipInput> gz) : in_(std::move(gz)) {
        start_member();
        feed(in_->from(nullptr));
    }

    size_t inflate(char* out, size_t capacity, std::string& error) override {
        state_.next_out = reinterpret_cast<uint8_t*>(out);
        state_.avail_out = uint32_t(std::min<size_t>(capacity, UINT32_MAX));
        const uint32_t asked = state_.avail_out;
        while (state_.avail_out > 0 && !ended_) {
            feed(in_->from(next_in()));
            const uint32_t in_before = state_.avail_in, out_before = state_.avail_out;
            const int rc = isal_inflate(&state_);
            if (rc < 0) {
                error = why(rc);
                break;
            }
            if (state_.block_state == ISAL_BLOCK_FINISH) {
                ++members_ended_;
                feed(in_->from(next_in()));
                if (state_.avail_in == 0) ended_ = true;
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
    size_t consumed() const override { return size_t(in_->offset(next_in())); }

private:
    const char* next_in() const { return reinterpret_cast<const char*>(state_.next_in); }
    void feed(std::string_view rest) {
        state_.next_in = reinterpret_cast<uint8_t*>(const_cast<char*>(rest.data()));
        state_.avail_in = uint32_t(std::min<size_t>(rest.size(), UINT32_MAX));
    }
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

    std::unique_ptr<GzipInput> in_;
    inflate_state state_{};
    size_t members_ended_ = 0;
};

}  // namespace

std::unique_ptr<Decoder> make_isal_decoder(std::unique_ptr<GzipInput> gz) { return std::make_unique<IsalDecoder>(std::move(gz)); }

uint32_t isal_crc32(const uint8_t* data, size_t n) { return crc32_gzip_refl(0, data, n); }

}  // namespace vramscope
