// libFuzzer: any bytes through the .vscope reader and analysis. CRCs would stop the fuzzer at the
// first chunk, so a flag byte lets it also feed chunks whose checksum is recomputed.
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "analysis/analyze.h"
#include "importers/torch_snapshot.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
    if (data[0] & 1) {
        // Fix up every chunk's CRC so the decoder behind it gets exercised.
        for (size_t off = 12; off + 12 <= bytes.size();) {
            uint32_t len;
            std::memcpy(&len, bytes.data() + off + 4, 4);
            if (len > bytes.size() - off - 12) break;
            uint32_t crc = uint32_t(crc32(0, reinterpret_cast<const Bytef*>(bytes.data() + off + 12), len));
            std::memcpy(&bytes[off + 8], &crc, 4);
            off += 12 + len;
        }
    }
    try {
        // The way every command reads: the reader, then validation (analysis trusts only what passes).
        vramscope::analyze(vramscope::load_bytes(bytes, "fuzz.vscope"));
    } catch (const std::runtime_error&) {
    }
    return 0;
}
