// Whole-file input: every reader takes bytes, so importers, the trace reader and tests share
// one way in.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include <string_view>


namespace vramscope {

using Bytes = std::vector<char>;

inline std::string_view view(const Bytes& b) { return {b.data(), b.size()}; }

// Throws std::runtime_error naming the path on any failure.
Bytes read_file(const std::string& path);

bool is_gzip(std::string_view bytes);

// Throws std::runtime_error("NAME: offset N: ...") on corrupt or cut gzip data.
Bytes gunzip(std::string_view gz, const std::string& name);

// The bytes of a file, gunzipped if they start with the gzip magic.
Bytes read_maybe_gzip(const std::string& path);

}  // namespace vramscope
