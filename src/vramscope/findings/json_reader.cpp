#include "findings/json_reader.h"

#include <cstring>
#include <stdexcept>

namespace vramscope {
namespace {

class JsonParser {
public:
    JsonParser(std::string_view text, const std::string& name, unsigned keep_depth, unsigned max_depth)
        : s_(text), name_(name), keep_depth_(keep_depth), max_depth_(max_depth) {}

    JsonValue document() {
        JsonValue v = value(0);
        space();
        if (i_ != s_.size()) fail("data after the JSON value");
        return v;
    }

private:
    [[noreturn]] void fail(const std::string& why) const {
        throw std::runtime_error(name_ + ": offset " + std::to_string(i_) + ": " + why);
    }
    void space() {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
    }
    void expect(char c) {
        space();
        if (i_ >= s_.size() || s_[i_] != c) fail(std::string("expected '") + c + "'");
        ++i_;
    }
    bool literal(const char* word) {
        const size_t n = std::strlen(word);
        if (s_.substr(i_, n) != word) return false;
        i_ += n;
        return true;
    }

    JsonValue value(unsigned depth) {
        if (depth > max_depth_) fail("nested deeper than " + std::to_string(max_depth_) + " levels");
        space();
        if (i_ >= s_.size()) fail("JSON cut short");
        const size_t begin = i_;
        JsonValue v;
        const char c = s_[i_];
        if (c == '{' || c == '[') {
            const bool object = c == '{';
            v.type = object ? JsonValue::Type::object : JsonValue::Type::array;
            ++i_;
            space();
            if (i_ < s_.size() && s_[i_] == (object ? '}' : ']')) {
                ++i_;
            } else {
                while (true) {
                    if (object) {
                        space();
                        if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string key");
                        std::string key = string_value();
                        if (depth < keep_depth_) v.keys.push_back(std::move(key));
                        expect(':');
                    }
                    JsonValue item = value(depth + 1);
                    if (depth < keep_depth_) v.items.push_back(std::move(item));
                    space();
                    if (i_ < s_.size() && s_[i_] == ',') {
                        ++i_;
                        continue;
                    }
                    expect(object ? '}' : ']');
                    break;
                }
            }
        } else if (c == '"') {
            v.type = JsonValue::Type::string;
            v.str = string_value();
        } else if (literal("null")) {
            v.type = JsonValue::Type::null;
        } else if (literal("true") || literal("false")) {
            v.type = JsonValue::Type::boolean;
        } else {
            v.type = JsonValue::Type::number;
            number();
        }
        v.text = s_.substr(begin, i_ - begin);
        return v;
    }

    void digits() {
        const size_t from = i_;
        while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
        if (i_ == from) fail("bad number");
    }
    void number() {
        if (i_ < s_.size() && s_[i_] == '-') ++i_;
        if (i_ < s_.size() && s_[i_] == '0') ++i_;
        else digits();
        if (i_ < s_.size() && s_[i_] == '.') ++i_, digits();
        if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
            ++i_;
            if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
            digits();
        }
    }

    // At the opening quote; UTF-8 as written, escapes decoded (a lone surrogate stays U+FFFD).
    std::string string_value() {
        ++i_;
        std::string out;
        while (true) {
            if (i_ >= s_.size()) fail("string cut short");
            const char c = s_[i_++];
            if (c == '"') return out;
            if (uint8_t(c) < 0x20) fail("control character inside a string");
            if (c != '\\') {
                out.push_back(c);
                continue;
            }
            if (i_ >= s_.size()) fail("string cut short");
            const char e = s_[i_++];
            switch (e) {
            case '"': case '\\': case '/': out.push_back(e); break;
            case 'b': out.push_back('\b'); break;
            case 'f': out.push_back('\f'); break;
            case 'n': out.push_back('\n'); break;
            case 'r': out.push_back('\r'); break;
            case 't': out.push_back('\t'); break;
            case 'u': utf8(out, hex4()); break;
            default: fail("bad escape in a string");
            }
        }
    }
    uint32_t hex4() {
        if (s_.size() - i_ < 4) fail("string cut short");
        uint32_t v = 0;
        for (int k = 0; k < 4; ++k) {
            const char h = s_[i_++];
            v <<= 4;
            if (h >= '0' && h <= '9') v |= uint32_t(h - '0');
            else if (h >= 'a' && h <= 'f') v |= uint32_t(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') v |= uint32_t(h - 'A' + 10);
            else fail("bad \\u escape");
        }
        return v;
    }
    static void utf8(std::string& out, uint32_t cp) {
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;  // names are compared, not reassembled
        if (cp < 0x80) {
            out.push_back(char(cp));
        } else if (cp < 0x800) {
            out.push_back(char(0xC0 | cp >> 6));
            out.push_back(char(0x80 | (cp & 0x3F)));
        } else {
            out.push_back(char(0xE0 | cp >> 12));
            out.push_back(char(0x80 | (cp >> 6 & 0x3F)));
            out.push_back(char(0x80 | (cp & 0x3F)));
        }
    }

    std::string_view s_;
    const std::string& name_;
    unsigned keep_depth_, max_depth_;
    size_t i_ = 0;
};

const char* type_name(JsonValue::Type t) {
    static constexpr const char* kNames[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    return kNames[int(t)];
}

}  // namespace

const JsonValue* JsonValue::get(std::string_view key) const {
    for (size_t k = 0; k < keys.size(); ++k)
        if (keys[k] == key) return &items[k];
    return nullptr;
}

JsonValue parse_json(std::string_view text, const std::string& name, unsigned keep_depth, unsigned max_depth) {
    return JsonParser(text, name, keep_depth, max_depth).document();
}

std::string report_data_from_findings(const std::vector<std::string>& texts, const std::vector<std::string>& names) {
    using T = JsonValue::Type;
    std::string runs, ranks = "null";
    size_t count = 0;
    for (size_t f = 0; f < texts.size(); ++f) {
        const std::string& name = names[f];
        const JsonValue doc = parse_json(texts[f], name, 2);  // the root, its runs, each run
        auto refuse = [&](const std::string& why) {
            throw std::runtime_error(name + ": not a findings JSON (vramscope analyze --json): " + why);
        };
        if (doc.type != T::object) refuse(std::string("its root is ") + type_name(doc.type) + ", not an object");
        const JsonValue* several = doc.get("runs");
        if (several && several->type != T::array) refuse(std::string("\"runs\" is ") + type_name(several->type) + ", not an array");
        if (!several && !doc.get("verdict")) refuse("it has neither \"runs\" nor \"verdict\"");
        for (const JsonValue& run : several ? several->items : std::vector<JsonValue>{doc}) {
            if (run.type != T::object) refuse(std::string("a run is ") + type_name(run.type) + ", not an object");
            runs += (count++ ? "," : "") + std::string(run.text);
        }
        const JsonValue* r = doc.get("ranks");
        if (r && r->type != T::object && r->type != T::null) refuse(std::string("\"ranks\" is ") + type_name(r->type));
        if (r && r->type == T::object && ranks == "null") ranks = std::string(r->text);
    }
    std::string owners;
    for (size_t k = 0; k < count; ++k) owners += k ? ",null" : "null";
    return "{\"generator\":\"vramscope " VRAMSCOPE_VERSION "\",\"runs\":[" + runs + "],\"ranks\":" + ranks +
           ",\"owners\":[" + owners + "]}";
}

}  // namespace vramscope
