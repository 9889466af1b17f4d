// Human units, one spelling everywhere: "36.0 MiB", "+512 B".
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vramscope {

std::string format_bytes(double bytes);         // "1.5 GiB", "-3.0 MiB", "512 B"
std::string format_count(uint64_t n);           // "1,912"
std::string count_of(uint64_t n, std::string_view noun);  // (1, "site") -> "1 site", (3, "batch") -> "3 batches"
std::string format_percent(double share);       // 0.05 -> "5%", 1.2 -> "120%"
std::string base_name(const std::string& path); // "/a/b/train.py" -> "train.py": a site as people say it
// "vramscope: train.vscope", "vramscope diff: a.vscope, b.vscope", "... +2 more": what a page is of,
// by its inputs' file names, as a browser's tab and history list it. Text, not yet HTML.
std::string page_title(std::string_view what, const std::vector<std::string>& sources);
// The length of the well-formed UTF-8 sequence at text[i] (1 to 4), or 0 when the bytes there
// are not one (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF, cut).
size_t utf8_length(std::string_view text, size_t i);

// Text from an input (a function or file name, a path) made harmless for a terminal: control
// characters (C0, DEL, C1: clear screen, window titles, CR/LF that forge lines, NUL) and bytes
// that are not UTF-8 become visible escapes such as "\x1b". keep_newlines: for prose of ours
// that quotes names.
std::string terminal_safe(std::string_view text, bool keep_newlines = false);
// Text in an HTML page as written, never markup: its specials as entities.
std::string html_escape(std::string_view text);
// Parses "80GiB", "80 GB", "81559MiB", "1e9": bytes; false on junk, and on sizes of 2^64 bytes or more.
bool parse_bytes(const std::string& text, uint64_t& out);

}  // namespace vramscope
