// The one compressor: gzip for the outputs asked for by a .gz name (export --memory-viz OUT.pickle.gz).
#pragma once
#include <string>
#include <string_view>

namespace vramscope {

// `data` as one gzip member (zlib's deflate, its default level); std::bad_alloc when memory runs out.
std::string gzip_compress(std::string_view data);

// Whether a path asks for gzip: it ends in ".gz".
bool names_gzip(std::string_view path);

}  // namespace vramscope
