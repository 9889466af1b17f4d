// What reading one input may cost, so that no file (a gzip bomb, a memo fan-out, a device that
// never ends) can take the machine: every reader checks these before it takes the memory, and
// fails naming the file, the offset and the limit. The CLI sets them (--max-decoded,
// --max-memory, --max-string, --max-depth); the defaults are far above any real snapshot (a 1 M-
// event one decodes to 91 MB). What an input makes us hold (pickle values in flight, events kept,
// strings, timelines, an export's output) is counted as the memory it takes, a growing vector's
// spare capacity included (kGrowthCharge), so that a run's peak RSS stays under max_held_bytes +
// kUnheldBytes; tests/python/test_hostile.py checks it on every hostile input.
#pragma once
#include <cstdint>

namespace vramscope {

struct ReadLimits {
    uint64_t max_decoded_bytes = uint64_t(16) << 30;  // read from a file or inflated from gzip
    uint64_t max_held_bytes = uint64_t(1) << 30;      // each of, with what it is held beside: pickle values not yet consumed; events (and a
                                                      // snapshot's live blocks) kept; .vscope strings decoded;
                                                      // the devices' step timelines; an export's output
    uint64_t max_string_bytes = uint64_t(16) << 20;   // one pickle string or bytes value
    uint32_t max_depth = 256;                         // containers open at once (pickle MARKs)
    uint32_t max_stack_frames = 4096;                 // frames kept per stack (snapshots: the innermost;
                                                      // a deeper .vscope stack is damage)
};

// A vector or string that grows by doubling holds up to twice what it keeps: it is charged that.
inline constexpr uint64_t kGrowthCharge = 2;
// What a run holds beside what max_held_bytes counts: the program and its libraries, the file's
// read-ahead and gzip blocks, the interpreter where Python runs the core.
inline constexpr uint64_t kUnheldBytes = uint64_t(256) << 20;

}  // namespace vramscope
