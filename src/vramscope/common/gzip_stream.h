// Inflates gzip input on a second thread (a BlockRing) while the caller parses the blocks
// already inflated: decompression costs almost nothing on top of parsing, and memory stays at a
// few MiB however large the snapshot. A gzip'd file is read in pieces on that thread too, so
// neither the file nor its content is ever whole in memory, and the parse starts at once.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "common/block_ring.h"
#include "common/chunk_source.h"
#include "common/file.h"
#include "common/inflate.h"

namespace vramscope {

// The whole gzip'd content at once (through a GzipStream). Throws std::runtime_error
// ("NAME: offset N: ...") on corrupt or cut gzip data, a bad CRC or length, trailing bytes that
// are not gzip, or content over max_decoded bytes.
Bytes gunzip(std::string_view gz, const std::string& name, uint64_t max_decoded = UINT64_MAX);

// The first bytes (up to n) of the gzip'd content, to tell what it is; empty if unreadable. The
// input is read only as far as zlib takes it.
std::string gunzip_prefix(ChunkSource& gz, size_t n);
std::string gunzip_prefix(std::string_view gz, size_t n);

// Each member's CRC-32 and length are checked at its end: read a stream to its end (next()
// returning false) for them to have been checked.
class GzipStream : public ChunkSource {
public:
    GzipStream(std::string_view gz, std::string name, uint64_t max_decoded = UINT64_MAX,
               Inflater inflater = fastest_inflater());
    // The file, read through read_into() on the inflating thread. Its errors ("PATH: read error")
    // are thrown as they are.
    GzipStream(std::unique_ptr<FileChunks> file, std::string name, uint64_t max_decoded = UINT64_MAX,
               Inflater inflater = fastest_inflater());
    ~GzipStream() override;

    bool next(std::string_view& chunk) override { return ring_.next(chunk); }
    // The gzip trailer's length of the last member: exact for one member under 4 GiB.
    uint64_t expected_bytes() const override { return expected_bytes_; }

private:
    size_t inflate_into(char* out, size_t capacity);  // the ring's producer

    std::string_view in_;               // the input in memory,
    std::unique_ptr<FileChunks> file_;  // or this file
    std::string name_;
    uint64_t max_decoded_;
    uint64_t expected_bytes_ = 0;
    Inflater inflater_;
    std::unique_ptr<Decoder> decoder_;  // made on the ring's thread
    uint64_t decoded_ = 0;
    std::string error_;  // met after a block's first bytes: thrown at the next call
    BlockRing ring_;  // last: its thread stops before the inflater goes
};

}  // namespace vramscope
