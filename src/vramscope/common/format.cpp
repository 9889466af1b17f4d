#include "common/format.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace vramscope {

std::string format_bytes(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = std::fabs(bytes);
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    char buf[48];
    if (u == 0) std::snprintf(buf, sizeof buf, "%s%.0f B", bytes < 0 ? "-" : "", v);
    else std::snprintf(buf, sizeof buf, "%s%.1f %s", bytes < 0 ? "-" : "", v, units[u]);
    return buf;
}

std::string base_name(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string format_count(uint64_t n) {
    std::string s = std::to_string(n), out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (i && (s.size() - i) % 3 == 0) out.push_back(',');
        out.push_back(s[i]);
    }
    return out;
}

bool parse_bytes(const std::string& text, uint64_t& out) {
    const char* p = text.c_str();
    char* end = nullptr;
    double v = std::strtod(p, &end);
    if (end == p || !(v >= 0)) return false;
    std::string unit;
    for (const char* q = end; *q; ++q)
        if (!std::isspace(static_cast<unsigned char>(*q))) unit.push_back(char(std::tolower(static_cast<unsigned char>(*q))));
    double mult = 1;
    if (unit.empty() || unit == "b") mult = 1;
    else if (unit == "k" || unit == "kib" || unit == "kb") mult = unit == "kb" ? 1e3 : 1024.0;
    else if (unit == "m" || unit == "mib" || unit == "mb") mult = unit == "mb" ? 1e6 : 1048576.0;
    else if (unit == "g" || unit == "gib" || unit == "gb") mult = unit == "gb" ? 1e9 : 1073741824.0;
    else if (unit == "t" || unit == "tib" || unit == "tb") mult = unit == "tb" ? 1e12 : 1099511627776.0;
    else return false;
    out = uint64_t(v * mult);
    return true;
}

std::string terminal_safe(std::string_view text, bool keep_newlines) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
        const auto c = uint8_t(text[i]);
        const bool c1 = c == 0xC2 && i + 1 < text.size() && uint8_t(text[i + 1]) >= 0x80 && uint8_t(text[i + 1]) <= 0x9F;
        if ((c < 0x20 && !(keep_newlines && c == '\n')) || c == 0x7F || c1) {
            char esc[8];
            std::snprintf(esc, sizeof esc, c1 ? "\\u%04x" : "\\x%02x", c1 ? unsigned(uint8_t(text[++i])) : unsigned(c));
            out += esc;
        } else {
            out.push_back(char(c));
        }
    }
    return out;
}

}  // namespace vramscope
