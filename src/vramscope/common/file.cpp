#include "common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace vramscope {

Bytes read_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    Bytes out;
    if (::fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(size_t(st.st_size));
    size_t used = 0;
    while (true) {
        if (out.size() < used + (1 << 16)) out.resize(std::max(out.capacity(), used + (1 << 16)));
        const ssize_t k = ::read(fd, out.data() + used, out.size() - used);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            const int err = errno;
            ::close(fd);
            throw std::runtime_error(path + ": read error: " + std::strerror(err));
        }
        if (k == 0) break;
        used += size_t(k);
    }
    ::close(fd);
    out.resize(used);
    return out;
}

bool is_gzip(std::string_view b) { return b.size() >= 2 && uint8_t(b[0]) == 0x1f && uint8_t(b[1]) == 0x8b; }

Bytes gunzip(std::string_view in, const std::string& name) {
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw std::runtime_error(name + ": cannot start gzip decoder");
    auto fail = [&](const std::string& why) {
        const size_t at = size_t(reinterpret_cast<const char*>(z.next_in) - in.data());
        inflateEnd(&z);
        throw std::runtime_error(name + ": offset " + std::to_string(at) + ": " + why);
    };
    // The trailer holds the size mod 2^32: exact for one member under 4 GiB, a good first guess
    // otherwise; one right-sized buffer saves copying the output as it grows.
    size_t guess = in.size() * 4 + 4096;
    if (in.size() >= 18) {
        uint32_t isize;
        std::memcpy(&isize, in.data() + in.size() - 4, 4);
        if (isize >= in.size() / 2) guess = size_t(isize) + 1;
    }
    Bytes out(guess);
    size_t produced = 0;
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = uInt(std::min<size_t>(in.size(), 0x7fffffff));
    while (true) {
        if (produced == out.size()) out.resize(out.size() * 2);
        z.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
        z.avail_out = uInt(std::min<size_t>(out.size() - produced, 0x7fffffff));
        const int rc = inflate(&z, Z_NO_FLUSH);
        produced = size_t(reinterpret_cast<char*>(z.next_out) - out.data());
        const size_t consumed = size_t(reinterpret_cast<const char*>(z.next_in) - in.data());
        if (z.avail_in == 0 && consumed < in.size()) z.avail_in = uInt(std::min<size_t>(in.size() - consumed, 0x7fffffff));
        if (rc == Z_STREAM_END) {
            if (consumed == in.size()) break;
            inflateReset(&z);  // concatenated gzip members are valid gzip
            continue;
        }
        if (rc == Z_OK || (rc == Z_BUF_ERROR && z.avail_out == 0)) continue;
        if (rc == Z_BUF_ERROR && z.avail_in == 0) fail("gzip data cut short");
        fail(z.msg ? z.msg : "corrupt gzip data");
    }
    out.resize(produced);
    inflateEnd(&z);
    return out;
}

std::string gunzip_prefix(std::string_view gz, size_t n) {
    std::string out(n, '\0');
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return {};
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
    z.avail_in = uInt(std::min<size_t>(gz.size(), 0x7fffffff));
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = uInt(n);
    const int rc = inflate(&z, Z_SYNC_FLUSH);
    out.resize(rc == Z_OK || rc == Z_STREAM_END ? n - z.avail_out : 0);
    inflateEnd(&z);
    return out;
}

}  // namespace vramscope
