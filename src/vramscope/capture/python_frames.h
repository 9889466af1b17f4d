// The calling thread's Python stack, read without the GIL.
//
// torch releases the GIL around every op, so an allocation arrives with no GIL held; taking it to
// ask for the stack (what torch's own recorder does) costs a third of the step. A thread's own
// interpreter frames cannot change while that thread is inside C++, so we read them in place:
// each frame's code object and instruction offset, nothing allocated, no CPython call that needs
// the GIL. The frame layout is CPython's private one, so this knows 3.11 to 3.13 and says
// `supported() == false` anywhere else; `self_check()` compares a walk against the interpreter's
// own answer before capture trusts it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "capture/stack_hash.h"

typedef struct _object PyObject;  // Python.h's

namespace vramscope::capture {

struct RawFrame {
    const void* code;  // PyCodeObject*, alive while its frame runs
    int64_t offset;    // byte offset of the current instruction in the code; 64 bits leave no
                       // padding, so stacks compare as bytes
    bool operator==(const RawFrame&) const = default;
};
static_assert(sizeof(RawFrame) == 16);

// Whether two walks are the same stack.
inline bool same_frames(const RawFrame* a, const RawFrame* b, size_t n) {
    return n == 0 || std::memcmp(a, b, n * sizeof(RawFrame)) == 0;
}

bool python_frames_supported();

// The frames a walk looks at, innermost first (a C-to-Python shim counts): deeper ones are left
// out of stacks.
constexpr size_t kWalkDepth = 256;

// Fills `out` (room for kWalkDepth) with the calling thread's frames that run code, innermost
// first; returns how many.
size_t walk_python_frames(RawFrame* out);
// Where a thread's frames were at its last walk. A walk is a chain of dependent loads, one frame
// after the other, and between two allocations a training step pushes the outer frames out of
// the caches: each would be a wait of its own. The next walk asks for them all at once first
// (most are where they were: only the innermost few change), so the chain finds them in cache.
struct FrameTrail {
    size_t n = 0;
    const void* at[kWalkDepth];
};

// The same walk, hashed instead of copied (each frame by its instruction pointer, the frame's own
// field: the code object is not read): an allocation's stack is nearly always one its thread met
// before, and then its frames need not be written anywhere (a dozen cache lines a walk).
// `trail`: the thread's own, read to prefetch, then rewritten.
[[gnu::hot]] StackHasher hash_python_frames(FrameTrail& trail);

// Text of a code object's file and function, and the line of an offset. Safe without the GIL
// while the code object is alive (its strings and line table are immutable).
struct CodeInfo {
    std::string file, function;
};
CodeInfo describe_code(const void* code);
uint32_t line_of(const void* code, int32_t offset);

// A frame's locals (cells' contents included) as a new dict, under the GIL. Before 3.13 a frame's
// f_locals is a snapshot the frame keeps: an owner search that read it would keep every tensor a
// local held then for as long as the frame runs (a training loop's main(): the whole run), after
// the loop let it go. This reads the frame's own slots and leaves nothing on it.
PyObject* frame_locals(PyObject* frame);

// Needs the GIL: walks the caller's stack both ways and says whether they agree (empty) or how
// they differ.
std::string self_check();

}  // namespace vramscope::capture
