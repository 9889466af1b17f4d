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

std::string page_title(std::string_view what, const std::vector<std::string>& sources) {
    constexpr size_t kNamed = 3;  // a tab shows little more
    std::string title(what);
    for (size_t i = 0; i < sources.size() && i < kNamed; ++i) title += (i ? ", " : ": ") + base_name(sources[i]);
    if (sources.size() > kNamed) title += " +" + std::to_string(sources.size() - kNamed) + " more";
    return title;
}

std::string format_count(uint64_t n) {
    std::string s = std::to_string(n), out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (i && (s.size() - i) % 3 == 0) out.push_back(',');
        out.push_back(s[i]);
    }
    return out;
}

std::string count_of(uint64_t n, std::string_view noun) {
    const bool sibilant = noun.ends_with("ch") || noun.ends_with("sh") || noun.ends_with('s') || noun.ends_with('x');
    return format_count(n) + " " + std::string(noun) + (n == 1 ? "" : sibilant ? "es" : "s");
}

std::string format_percent(double share) { return std::to_string(std::llround(share * 100)) + "%"; }

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
    // Past 2^64 (or inf), the conversion would wrap or be undefined: "99999999999999999999999 TB" is no size.
    const double bytes = v * mult;
    if (!(bytes < 18446744073709551616.0)) return false;
    out = uint64_t(bytes);
    return true;
}

size_t utf8_length(std::string_view text, size_t i) {
    const auto byte = [&](size_t k) { return i + k < text.size() ? uint8_t(text[i + k]) : uint8_t(0); };
    const uint8_t c = byte(0);
    if (c < 0x80) return 1;
    const size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    for (size_t k = 1; k < n; ++k)
        if ((byte(k) & 0xC0) != 0x80) return 0;
    // The second byte's range rules out overlong forms, surrogates and code points past U+10FFFF.
    if ((c == 0xE0 && byte(1) < 0xA0) || (c == 0xED && byte(1) > 0x9F) || (c == 0xF0 && byte(1) < 0x90) ||
        (c == 0xF4 && byte(1) > 0x8F))
        return 0;
    return n;
}

std::string html_escape(std::string_view s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '&': out += "&amp;"; break;
            case '"': out += "&quot;"; break;
            default: out += c;
        }
    }
    return out;
}

std::string terminal_safe(std::string_view text, bool keep_newlines) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        const auto c = uint8_t(text[i]);
        const size_t n = utf8_length(text, i);
        const bool c1 = n == 2 && c == 0xC2 && uint8_t(text[i + 1]) <= 0x9F;
        char esc[8];
        if (c1) {
            std::snprintf(esc, sizeof esc, "\\u%04x", unsigned(uint8_t(text[i + 1])));
        } else if (n == 0 || (c < 0x20 && !(keep_newlines && c == '\n')) || c == 0x7F) {
            std::snprintf(esc, sizeof esc, "\\x%02x", unsigned(c));
        } else {
            out.append(text, i, n);
            i += n;
            continue;
        }
        out += esc;
        i += n ? n : 1;
    }
    return out;
}

}  // namespace vramscope
