#include "common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace vramscope {

uint64_t file_size(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 ? uint64_t(st.st_size) : 0;
}

int open_regular_file(const std::string& path, uint64_t max_bytes, uint64_t& size) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        const bool dir = S_ISDIR(st.st_mode);
        ::close(fd);
        throw std::runtime_error(path + (dir ? ": is a directory" : ": not a regular file (a pipe, device or socket may never end; save it to a file first)"));
    }
    if (uint64_t(st.st_size) > max_bytes) {
        ::close(fd);
        throw std::runtime_error(path + ": " + std::to_string(st.st_size) + " bytes; the limit is " +
                                 std::to_string(max_bytes) + " (--max-decoded raises it)");
    }
    size = uint64_t(st.st_size);
    return fd;
}

Bytes read_file(const std::string& path, uint64_t max_bytes) {
    uint64_t size = 0;
    const int fd = open_regular_file(path, max_bytes, size);
    Bytes out;
    out.reserve(size_t(size));
    size_t used = 0;
    while (true) {
        if (used > max_bytes)  // the file grew while read
            throw std::runtime_error(path + ": offset " + std::to_string(max_bytes) + ": more bytes than the limit of " +
                                     std::to_string(max_bytes) + " (--max-decoded raises it)");
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

namespace {
// false with errno set when a write fails.
bool write_fd(int fd, std::string_view data) {
    while (!data.empty()) {
        const ssize_t k = ::write(fd, data.data(), data.size());
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        data.remove_prefix(size_t(k));
    }
    return true;
}
}  // namespace

void write_file(const std::string& path, std::string_view data, const char* what) {
    auto fail = [&](int err) { throw std::runtime_error(path + ": cannot write the " + what + ": " + std::strerror(err)); };
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail(errno);
    if (!write_fd(fd, data)) {
        const int err = errno;
        ::close(fd);
        fail(err);
    }
    if (::close(fd) != 0) fail(errno);
}

void write_stdout(std::string_view data) {
    if (!write_fd(STDOUT_FILENO, data)) throw std::runtime_error(std::string("stdout: ") + std::strerror(errno));
}

bool same_file(const std::string& a, const std::string& b) {
    struct stat sa, sb;
    return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

bool is_gzip(std::string_view b) { return b.size() >= 2 && uint8_t(b[0]) == 0x1f && uint8_t(b[1]) == 0x8b; }

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
