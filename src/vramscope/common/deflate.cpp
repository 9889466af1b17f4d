#include "common/deflate.h"

#include <zlib.h>

#include <algorithm>
#include <new>
#include <stdexcept>

namespace vramscope {

std::string gzip_compress(std::string_view data) {
    z_stream z{};
    constexpr int kGzipWindow = 16 + MAX_WBITS;  // a gzip header and trailer around the deflate stream
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, kGzipWindow, 8, Z_DEFAULT_STRATEGY) != Z_OK) throw std::bad_alloc();
    std::string out;
    const auto* in = reinterpret_cast<const Bytef*>(data.data());
    size_t left = data.size();
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
        const uInt step = uInt(std::min<size_t>(left, 1u << 30));  // avail_in is 32 bits
        z.next_in = const_cast<Bytef*>(in);
        z.avail_in = step;
        const int flush = step == left ? Z_FINISH : Z_NO_FLUSH;
        do {
            const size_t had = out.size();
            out.resize(had + (1u << 20));
            z.next_out = reinterpret_cast<Bytef*>(out.data() + had);
            z.avail_out = 1u << 20;
            rc = deflate(&z, flush);
            out.resize(out.size() - z.avail_out);
            if (rc == Z_STREAM_ERROR) {
                deflateEnd(&z);
                throw std::runtime_error("gzip: deflate failed");
            }
        } while (z.avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
        in += step - z.avail_in;
        left -= step - z.avail_in;
    }
    deflateEnd(&z);
    return out;
}

bool names_gzip(std::string_view path) { return path.ends_with(".gz"); }

}  // namespace vramscope
