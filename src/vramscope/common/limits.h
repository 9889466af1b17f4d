// What reading one input may cost, so that no file (a gzip bomb, a memo fan-out, a device that
// never ends) can take the machine: every reader checks these and fails naming the file, the
// offset and the limit. The CLI sets them (--max-decoded, --max-memory, --max-string,
// --max-depth); the defaults are far above any real snapshot (a 1 M-event one decodes to 91 MB).
// Reading then holds at most about 2 x max_held_bytes (pickle values in flight, events kept),
// vectors' growth and a few MiB of buffers aside; tests/python/test_hostile.py checks a whole run
// stays under 4 x max_held_bytes + 200 MiB.
#pragma once
#include <cstdint>

namespace vramscope {

struct ReadLimits {
    uint64_t max_decoded_bytes = uint64_t(16) << 30;  // read from a file or inflated from gzip
    uint64_t max_held_bytes = uint64_t(2) << 30;      // each of: pickle values not yet consumed; events (and a
                                                      // snapshot's live blocks) kept; .vscope strings decoded;
                                                      // the devices' step timelines; an export's output
    uint64_t max_string_bytes = uint64_t(16) << 20;   // one pickle string or bytes value
    uint32_t max_depth = 256;                         // containers open at once (pickle MARKs)
    uint32_t max_stack_frames = 4096;                 // frames kept per stack (snapshots: the innermost;
                                                      // a deeper .vscope stack is damage)
};

}  // namespace vramscope
