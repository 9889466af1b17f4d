// Whole-file input: every reader takes bytes, so importers and tests share one way in.
#pragma once
#include <string>

namespace vramscope {

// Throws std::runtime_error naming the path on any failure.
std::string read_file(const std::string& path);

// The bytes of a file, gunzipped if they start with the gzip magic.
std::string read_maybe_gzip(const std::string& path);

// Throws std::runtime_error("NAME: offset N: ...") on corrupt or cut gzip data.
std::string gunzip(const std::string& bytes, const std::string& name);

}  // namespace vramscope
