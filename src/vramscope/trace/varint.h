// LEB128 varints and zigzag: the only integer encoding the trace format uses.
#pragma once
#include <cstdint>
#include <string>

namespace vramscope {

inline void put_varint(std::string& out, uint64_t v) {
    while (v >= 0x80) {
        out.push_back(char(uint8_t(v) | 0x80));
        v >>= 7;
    }
    out.push_back(char(v));
}

inline uint64_t zigzag(int64_t v) { return (uint64_t(v) << 1) ^ uint64_t(v >> 63); }
inline int64_t unzigzag(uint64_t v) { return int64_t(v >> 1) ^ -int64_t(v & 1); }

// Reads a varint from [p, end); returns false (leaving p) on a cut or over-long encoding.
inline bool get_varint(const uint8_t*& p, const uint8_t* end, uint64_t& v) {
    uint64_t result = 0;
    const uint8_t* q = p;
    for (int shift = 0; shift < 64 && q < end; shift += 7) {
        uint8_t byte = *q++;
        result |= uint64_t(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            v = result;
            p = q;
            return true;
        }
    }
    return false;
}

}  // namespace vramscope
