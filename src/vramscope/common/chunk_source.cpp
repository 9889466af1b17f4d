#include "common/chunk_source.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/progress.h"

namespace vramscope {

Bytes read_all(ChunkSource& chunks) {
    Bytes out;
    std::string_view chunk;
    while (chunks.next(chunk)) out.insert(out.end(), chunk.begin(), chunk.end());
    return out;
}

FileChunks::FileChunks(const std::string& path, uint64_t max_bytes, size_t block)
    : path_(path), max_bytes_(max_bytes) {
    fd_ = open_regular_file(path, max_bytes, size_);
    block_.resize(block);
}

FileChunks::~FileChunks() { ::close(fd_); }

bool FileChunks::next(std::string_view& chunk) {
    const size_t used = read_into(block_.data(), block_.size());
    chunk = std::string_view(block_.data(), used);
    return used > 0;
}

std::string FileChunks::last_bytes(size_t n) const {
    std::string out(size_t(std::min<uint64_t>(n, size_)), '\0');
    const ssize_t k = ::pread(fd_, out.data(), out.size(), off_t(size_ - out.size()));
    out.resize(k > 0 ? size_t(k) : 0);
    return out;
}

size_t FileChunks::read_into(char* out, size_t capacity) {
    size_t used = 0;
    while (used < capacity) {
        const ssize_t k = ::read(fd_, out + used, capacity - used);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) throw std::runtime_error(path_ + ": read error: " + std::strerror(errno));
        if (k == 0) break;
        used += size_t(k);
    }
    read_ += used;
    if (read_ > max_bytes_)  // the file grew while read
        throw std::runtime_error(path_ + ": offset " + std::to_string(max_bytes_) + ": more bytes than the limit of " +
                                 std::to_string(max_bytes_) + " (--max-decoded raises it)");
    Progress::report(read_);
    return used;
}

}  // namespace vramscope
