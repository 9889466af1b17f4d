#include "common/read_ahead.h"

namespace vramscope {

ReadAheadFile::ReadAheadFile(const std::string& path, uint64_t max_bytes)
    : file_(path, max_bytes, 0), ring_([this](char* out, size_t capacity) { return file_.read_into(out, capacity); }) {}

}  // namespace vramscope
