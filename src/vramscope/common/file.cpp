#include "common/file.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace vramscope {

std::string read_file(const std::string& path) {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
    if (!f) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
    std::string out;
    if (std::fseek(f.get(), 0, SEEK_END) == 0) {
        long n = std::ftell(f.get());
        if (n > 0) out.reserve(size_t(n));
        std::fseek(f.get(), 0, SEEK_SET);
    }
    char buf[1 << 16];
    size_t k;
    while ((k = std::fread(buf, 1, sizeof buf, f.get())) > 0) out.append(buf, k);
    if (std::ferror(f.get())) throw std::runtime_error(path + ": read error: " + std::strerror(errno));
    return out;
}

std::string gunzip(const std::string& in, const std::string& name) {
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw std::runtime_error(name + ": cannot start gzip decoder");
    auto fail = [&](const std::string& why) {
        size_t at = size_t(reinterpret_cast<const char*>(z.next_in) - in.data());
        inflateEnd(&z);
        throw std::runtime_error(name + ": offset " + std::to_string(at) + ": " + why);
    };
    std::string out(in.size() * 8 + 4096, '\0');  // snapshots compress ~8x; grow from there
    size_t produced = 0;
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = uInt(in.size());
    while (true) {
        if (produced == out.size()) out.resize(out.size() * 2);
        z.next_out = reinterpret_cast<Bytef*>(&out[produced]);
        z.avail_out = uInt(out.size() - produced);
        int rc = inflate(&z, Z_NO_FLUSH);
        produced = size_t(reinterpret_cast<char*>(z.next_out) - out.data());
        if (rc == Z_STREAM_END) {
            if (z.avail_in == 0) break;
            inflateReset(&z);  // concatenated gzip members are valid gzip
            continue;
        }
        if (rc == Z_OK || (rc == Z_BUF_ERROR && z.avail_out == 0)) continue;
        if (rc == Z_BUF_ERROR && z.avail_in == 0) fail("gzip data cut short");
        fail(z.msg ? z.msg : "corrupt gzip data");
    }
    out.resize(produced);
    inflateEnd(&z);
    return out;
}

std::string read_maybe_gzip(const std::string& path) {
    std::string bytes = read_file(path);
    if (bytes.size() >= 2 && uint8_t(bytes[0]) == 0x1f && uint8_t(bytes[1]) == 0x8b) return gunzip(bytes, path);
    return bytes;
}

}  // namespace vramscope
