// Input that arrives in pieces: a gzip stream inflated on a second thread (gzip_stream.h), a
// file read in fixed blocks, or a buffer cut into pieces. The pickle parser and the .vscope
// reader take any of them, so no input has to be whole in memory.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "common/file.h"

namespace vramscope {

// Input that arrives in chunks.
class ChunkSource {
public:
    virtual ~ChunkSource() = default;
    // Hands back the previous chunk and gives the next one; false at the end. Throws what the
    // producer failed with.
    virtual bool next(std::string_view& chunk) = 0;
    // How many bytes all the chunks will hold, if known (0: not known): a reader sizes its
    // tables once rather than copying them as they grow. Only a hint: the input may differ.
    virtual uint64_t expected_bytes() const { return 0; }
};

// All the chunks, one after the other.
Bytes read_all(ChunkSource& chunks);

// A buffer handed out in pieces of a fixed size: how tests and the fuzzer put chunk boundaries
// everywhere a gzip stream might.
class FixedChunks : public ChunkSource {
public:
    FixedChunks(std::string_view all, size_t piece)
        : rest_(all), piece_(piece ? piece : all.size() + 1), total_(all.size()) {}
    uint64_t expected_bytes() const override { return total_; }
    std::string_view first() { return cut(); }
    bool next(std::string_view& chunk) override {
        if (rest_.empty()) return false;
        chunk = cut();
        return true;
    }

private:
    std::string_view cut() {
        const std::string_view c = rest_.substr(0, piece_);
        rest_.remove_prefix(c.size());
        return c;
    }
    std::string_view rest_;
    size_t piece_;
    uint64_t total_;
};

// A regular file read in fixed blocks into one reused buffer: input of any size in a few MiB.
// Refuses what read_file() refuses (not a regular file, more than max_bytes). ReadAheadFile
// (read_ahead.h) reads it on a second thread.
class FileChunks : public ChunkSource {
public:
    FileChunks(const std::string& path, uint64_t max_bytes = UINT64_MAX, size_t block = 1 << 20);
    ~FileChunks() override;
    FileChunks(const FileChunks&) = delete;
    FileChunks& operator=(const FileChunks&) = delete;
    bool next(std::string_view& chunk) override;
    // Up to `capacity` bytes into `out`, the same checks; 0 at the end.
    size_t read_into(char* out, size_t capacity);
    uint64_t expected_bytes() const override { return size_; }
    uint64_t size() const { return size_; }  // as the file was when opened
    // The last n bytes as the file was when opened (fewer if it shrank), read in place.
    std::string last_bytes(size_t n) const;

private:
    std::string path_;
    uint64_t max_bytes_, size_ = 0, read_ = 0;
    int fd_ = -1;
    Bytes block_;
};

}  // namespace vramscope
