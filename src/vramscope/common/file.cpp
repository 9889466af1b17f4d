#include "common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
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

[[noreturn]] void cannot_write(const std::string& path, const char* what, int err) {
    throw std::runtime_error(path + ": cannot write the " + what + ": " + std::strerror(err));
}

// "DIR/.NAME.XXXXXX.tmp", created (exclusively, with the mode a new file gets) beside path.
std::string create_temporary_beside(const std::string& path, const char* what) {
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
    const std::string name = path.substr(dir.size(), 200);  // room for the suffix under NAME_MAX
    std::random_device random;
    for (int attempt = 0; attempt < 100; ++attempt) {
        char suffix[16];
        std::snprintf(suffix, sizeof suffix, ".%08x.tmp", unsigned(random()));
        const std::string temporary = dir + "." + name + suffix;
        const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) {
            ::close(fd);
            return temporary;
        }
        if (errno != EEXIST) cannot_write(path, what, errno);
    }
    cannot_write(path, what, EEXIST);
}
}  // namespace

void replace_file(const std::string& path, const char* what, const std::function<void(const std::string&)>& write) {
    if (path.empty()) cannot_write(path, what, ENOENT);
    struct stat st {};
    const bool exists = ::stat(path.c_str(), &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) cannot_write(path, what, EISDIR);
    if (exists && !S_ISREG(st.st_mode)) return write(path);
    const std::string temporary = create_temporary_beside(path, what);
    try {
        try {
            write(temporary);
        } catch (const std::runtime_error& e) {  // the error names the target, not the temporary file
            std::string why = e.what();
            for (size_t at; (at = why.find(temporary)) != std::string::npos;) why.replace(at, temporary.size(), path);
            throw std::runtime_error(why);
        }
        if (exists) ::chmod(temporary.c_str(), st.st_mode & 07777);  // a replaced file keeps its mode
        if (::rename(temporary.c_str(), path.c_str()) != 0) cannot_write(path, what, errno);
    } catch (...) {
        ::unlink(temporary.c_str());
        throw;
    }
}

void write_file(const std::string& path, std::string_view data, const char* what) {
    replace_file(path, what, [&](const std::string& target) {
        const int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) cannot_write(path, what, errno);
        if (!write_fd(fd, data)) {
            const int err = errno;
            ::close(fd);
            cannot_write(path, what, err);
        }
        if (::close(fd) != 0) cannot_write(path, what, errno);
    });
}

void write_stdout(std::string_view data) {
    if (!write_fd(STDOUT_FILENO, data)) {
        if (errno == EPIPE) throw StdoutClosed();
        throw std::runtime_error(std::string("stdout: ") + std::strerror(errno));
    }
}

bool same_file(const std::string& a, const std::string& b) {
    struct stat sa, sb;
    if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    std::error_code ea, eb;
    const auto ca = std::filesystem::weakly_canonical(a, ea), cb = std::filesystem::weakly_canonical(b, eb);
    return !ea && !eb && ca == cb;
}

bool is_gzip(std::string_view b) { return b.size() >= 2 && uint8_t(b[0]) == 0x1f && uint8_t(b[1]) == 0x8b; }

}  // namespace vramscope
