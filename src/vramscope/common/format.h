// Human units, one spelling everywhere: "36.0 MiB", "+512 B".
#pragma once
#include <cstdint>
#include <string>

namespace vramscope {

std::string format_bytes(double bytes);         // "1.5 GiB", "-3.0 MiB", "512 B"
std::string format_count(uint64_t n);           // "1,912"
std::string base_name(const std::string& path); // "/a/b/train.py" -> "train.py": a site as people say it
// Parses "80GiB", "80 GB", "81559MiB", "1e9": bytes; false on junk.
bool parse_bytes(const std::string& text, uint64_t& out);

}  // namespace vramscope
