// The JSON writer findings and the HTML report share: appends to a string, no DOM, no copies.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "common/format.h"

namespace vramscope {

class Json {
public:
    std::string out;

    void open(char c) {
        comma();
        out.push_back(c);
        first_ = true;
    }
    void close(char c) {
        out.push_back(c);
        first_ = false;
    }
    void key(const char* k) {
        comma();
        str(k);
        out.push_back(':');
        first_ = true;  // the value follows without a comma
    }
    void value(std::string_view s) {
        comma();
        str(s);
    }
    void value(const char* s) { value(std::string_view(s)); }
    void value(uint64_t v) {
        comma();
        out += std::to_string(v);
    }
    void value(int64_t v) {
        comma();
        out += std::to_string(v);
    }
    void value(double v) {
        comma();
        if (!std::isfinite(v)) {
            out += "null";
            return;
        }
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.6g", v);
        out += buf;
    }
    void value(bool v) {
        comma();
        out += v ? "true" : "false";
    }
    void null() {
        comma();
        out += "null";
    }
    template <class T> void field(const char* k, const T& v) {
        key(k);
        value(v);
    }
    // Bytes, or bytes a step, fitted as a double: written whole, as every byte count is (a double
    // would print 2.62144e+06, six digits and an exponent, where 2621440 was meant).
    void bytes_field(const char* k, double bytes) {
        key(k);
        if (std::isfinite(bytes)) value(int64_t(std::llround(bytes)));
        else null();
    }

private:
    void comma() {
        if (!first_) out.push_back(',');
        first_ = false;
    }
    // Always valid JSON: bytes that are not UTF-8 (a name from a damaged file) become U+FFFD.
    void str(std::string_view s) {
        out.push_back('"');
        for (size_t i = 0; i < s.size(); ++i) {
            const auto c = uint8_t(s[i]);
            if (c >= 0x80) {
                const size_t n = utf8_length(s, i);
                if (n) out.append(s, i, n), i += n - 1;
                else out += "\\ufffd";
                continue;
            }
            switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            case '\r': out += "\\r"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out.push_back(char(c));
                }
            }
        }
        out.push_back('"');
    }
    bool first_ = true;
};

// A source line as every findings-shaped JSON spells it: {"file", "line", "function"}.
template <class Line> void write_source_line(Json& j, const Line& s) {
    j.open('{');
    j.field("file", s.file);
    j.field("line", uint64_t(s.line));
    j.field("function", s.function);
    j.close('}');
}

}  // namespace vramscope
