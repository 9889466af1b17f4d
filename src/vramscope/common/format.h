// Human units, one spelling everywhere: "36.0 MiB", "+512 B".
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace vramscope {

std::string format_bytes(double bytes);         // "1.5 GiB", "-3.0 MiB", "512 B"
std::string format_count(uint64_t n);           // "1,912"
std::string base_name(const std::string& path); // "/a/b/train.py" -> "train.py": a site as people say it
// Text from an input (a function or file name, a path) made harmless for a terminal: control
// characters (C0, DEL, C1: clear screen, window titles, CR/LF that forge lines, NUL) become
// visible escapes such as "\x1b". keep_newlines: for prose of ours that quotes names.
std::string terminal_safe(std::string_view text, bool keep_newlines = false);
// Parses "80GiB", "80 GB", "81559MiB", "1e9": bytes; false on junk.
bool parse_bytes(const std::string& text, uint64_t& out);

}  // namespace vramscope
