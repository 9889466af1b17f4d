#include "capture/python_frames.h"

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>

#include <algorithm>
#include <cstddef>

namespace vramscope::capture {
namespace {

// CPython's _PyInterpreterFrame, as far as we read it (Include/internal/pycore_frame.h).
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define VRAMSCOPE_FRAMES 311
struct InterpreterFrame {
    PyObject* f_func;
    PyObject* f_globals;
    PyObject* f_builtins;
    PyObject* f_locals;
    PyCodeObject* f_code;
    PyFrameObject* frame_obj;
    InterpreterFrame* previous;
    _Py_CODEUNIT* prev_instr;
    int stacktop;
    bool is_entry;
    char owner;
};
#elif PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000
#define VRAMSCOPE_FRAMES 312
struct InterpreterFrame {
    PyCodeObject* f_code;
    InterpreterFrame* previous;
    PyObject* f_funcobj;
    PyObject* f_globals;
    PyObject* f_builtins;
    PyObject* f_locals;
    PyFrameObject* frame_obj;
    _Py_CODEUNIT* prev_instr;
    int stacktop;
    uint16_t return_offset;
    char owner;
};
#elif PY_VERSION_HEX >= 0x030D0000 && PY_VERSION_HEX < 0x030E0000
#define VRAMSCOPE_FRAMES 313
struct InterpreterFrame {
    PyObject* f_executable;
    InterpreterFrame* previous;
    PyObject* f_funcobj;
    PyObject* f_globals;
    PyObject* f_builtins;
    PyObject* f_locals;
    PyFrameObject* frame_obj;
    _Py_CODEUNIT* instr_ptr;
    int stacktop;
    uint16_t return_offset;
    char owner;
};
#else
#define VRAMSCOPE_FRAMES 0
#endif

#if VRAMSCOPE_FRAMES
constexpr char kOwnedByCStack = 3;  // 3.12+: a shim frame of a C-to-Python call, not code

const InterpreterFrame* current_frame(PyThreadState* t) {
#if VRAMSCOPE_FRAMES >= 313
    return reinterpret_cast<const InterpreterFrame*>(t->current_frame);
#else
    return t->cframe ? reinterpret_cast<const InterpreterFrame*>(t->cframe->current_frame) : nullptr;
#endif
}

PyCodeObject* code_of(const InterpreterFrame* f) {
#if VRAMSCOPE_FRAMES >= 313
    return PyCode_Check(f->f_executable) ? reinterpret_cast<PyCodeObject*>(f->f_executable) : nullptr;
#else
    return f->f_code;
#endif
}

// Byte offset of the instruction the frame is at; negative for a frame still being set up. Only
// pointer arithmetic: reading the code object here would cost a cache miss a frame.
int32_t offset_of(const InterpreterFrame* f, PyCodeObject* code) {
    const auto* first = reinterpret_cast<const char*>(code) + offsetof(PyCodeObject, co_code_adaptive);
#if VRAMSCOPE_FRAMES >= 313
    const auto* at = reinterpret_cast<const char*>(f->instr_ptr);
#else
    const auto* at = reinterpret_cast<const char*>(f->prev_instr);
#endif
    return int32_t(at - first);
}
#endif

void append_utf8(std::string& out, PyObject* s) {
    if (!s || !PyUnicode_Check(s)) return;
    const Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const int kind = PyUnicode_KIND(s);
    const void* data = PyUnicode_DATA(s);
    for (Py_ssize_t i = 0; i < n; ++i) {
        const Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < 0x80) {
            out.push_back(char(c));
        } else if (c < 0x800) {
            out.push_back(char(0xC0 | c >> 6));
            out.push_back(char(0x80 | (c & 0x3F)));
        } else if (c < 0x10000) {
            out.push_back(char(0xE0 | c >> 12));
            out.push_back(char(0x80 | (c >> 6 & 0x3F)));
            out.push_back(char(0x80 | (c & 0x3F)));
        } else {
            out.push_back(char(0xF0 | c >> 18));
            out.push_back(char(0x80 | (c >> 12 & 0x3F)));
            out.push_back(char(0x80 | (c >> 6 & 0x3F)));
            out.push_back(char(0x80 | (c & 0x3F)));
        }
    }
}

}  // namespace

bool python_frames_supported() { return VRAMSCOPE_FRAMES != 0; }

namespace {
// Calls f(code, offset) for up to `max` frames of the calling thread, innermost first, and
// visited(frame, k) for the k-th frame passed through (shims too).
template <class F, class V>
void for_each_frame(size_t max, F&& f, V&& visited) {
#if VRAMSCOPE_FRAMES
    // The thread's own state, from thread-local storage: no GIL needed to find it.
    PyThreadState* t = PyGILState_GetThisThreadState();
    if (!t) return;
    size_t n = 0, k = 0;
    for (const InterpreterFrame* frame = current_frame(t); frame && n < max; frame = frame->previous) {
        visited(static_cast<const void*>(frame), k++);
        if (frame->owner == kOwnedByCStack) continue;
        PyCodeObject* code = code_of(frame);
        if (!code) continue;
        const int32_t offset = offset_of(frame, code);
        if (offset < 0) continue;
        f(code, offset);
        ++n;
    }
#else
    (void)max;
    (void)f;
    (void)visited;
#endif
}
}  // namespace

size_t walk_python_frames(RawFrame* out, size_t max) {
    size_t n = 0;
    for_each_frame(max, [&](const void* code, int32_t offset) { out[n++] = RawFrame{code, offset}; },
                   [](const void*, size_t) {});
    return n;
}

StackHasher hash_python_frames(size_t max, FrameTrail& trail) {
    for (size_t i = 0; i < trail.n; ++i) {  // a frame's fields we read span at most two lines
        __builtin_prefetch(trail.at[i]);
        __builtin_prefetch(static_cast<const char*>(trail.at[i]) + 64);
    }
    StackHasher h;
    size_t visited = 0;
    for_each_frame(max, [&](const void* code, int32_t offset) { h.add(code, offset); },
                   [&](const void* frame, size_t k) {
                       if (k < FrameTrail::kFrames) trail.at[k] = frame;
                       visited = k + 1;
                   });
    trail.n = std::min(visited, FrameTrail::kFrames);
    return h;
}

CodeInfo describe_code(const void* code) {
    auto* c = static_cast<PyCodeObject*>(const_cast<void*>(code));
    CodeInfo info;
    append_utf8(info.file, c->co_filename);
    append_utf8(info.function, c->co_name);
    return info;
}

uint32_t line_of(const void* code, int32_t offset) {
    const int line = PyCode_Addr2Line(static_cast<PyCodeObject*>(const_cast<void*>(code)), offset);
    return line > 0 ? uint32_t(line) : 0;
}

std::string self_check() {
    if (!python_frames_supported()) return "no frame reader for Python " PY_VERSION;
    RawFrame walked[256];
    const size_t n = walk_python_frames(walked, 256);
    size_t i = 0;
    PyFrameObject* f = PyEval_GetFrame();
    Py_XINCREF(f);
    std::string problem;
    while (f && problem.empty()) {
        PyCodeObject* code = PyFrame_GetCode(f);
        const int line = PyFrame_GetLineNumber(f);
        if (i >= n)
            problem = "walk stopped after " + std::to_string(n) + " frames";
        else if (walked[i].code != code || line_of(walked[i].code, int32_t(walked[i].offset)) != uint32_t(line))
            problem = "frame " + std::to_string(i) + " differs: " + describe_code(code).function;
        Py_DECREF(code);
        PyFrameObject* back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
        ++i;
    }
    Py_XDECREF(f);
    if (problem.empty() && i != n) problem = "walk found " + std::to_string(n) + " frames, Python " + std::to_string(i);
    // The hook's walk, prefetching from the trail this thread's earlier checks left, hashes the same frames.
    static thread_local FrameTrail trail;
    StackHasher expected;
    for (size_t k = 0; k < n; ++k) expected.add(walked[k].code, walked[k].offset);
    const StackKey hashed = hash_python_frames(256, trail).key(nullptr), want = expected.key(nullptr);
    if (problem.empty() && (hashed.hash != want.hash || hashed.check != want.check || hashed.frames != want.frames))
        problem = "the hashed walk differs from the walk (" + std::to_string(hashed.frames) + " frames hashed, " +
                  std::to_string(n) + " walked)";
    return problem;
}

}  // namespace vramscope::capture
