// A regular file read ahead on a second thread, into the blocks of a BlockRing, while the caller
// parses the blocks already read: the reading (a copy out of the page cache, a third of a second
// for a 455 MB snapshot here) leaves the parsing thread, as inflating a gzip'd file does.
#pragma once
#include <string>

#include "common/block_ring.h"
#include "common/chunk_source.h"

namespace vramscope {

class ReadAheadFile : public ChunkSource {
public:
    // Refuses what FileChunks refuses, at once.
    explicit ReadAheadFile(const std::string& path, uint64_t max_bytes = UINT64_MAX);
    bool next(std::string_view& chunk) override { return ring_.next(chunk); }
    uint64_t expected_bytes() const override { return file_.size(); }

private:
    FileChunks file_;  // read through read_into() alone, from the ring's thread
    BlockRing ring_;   // last: its thread stops before the file closes
};

}  // namespace vramscope
