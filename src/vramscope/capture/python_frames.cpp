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
    PyObject* localsplus[1];
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
    PyObject* localsplus[1];
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
const InterpreterFrame* current_frame(PyThreadState* t) {
#if VRAMSCOPE_FRAMES >= 313
    return reinterpret_cast<const InterpreterFrame*>(t->current_frame);
#else
    return t->cframe ? reinterpret_cast<const InterpreterFrame*>(t->cframe->current_frame) : nullptr;
#endif
}

// A frame of Python code, not the shim of a C-to-Python call (3.12 on; 3.11 has none). The hashed
// walk reads of each frame its instruction pointer and link, and on 3.12 this byte as well.
bool runs_code(const InterpreterFrame* f) {
    [[maybe_unused]] constexpr char kOwnedByCStack = 3;
#if VRAMSCOPE_FRAMES >= 313
    return f->owner != kOwnedByCStack && PyCode_Check(f->f_executable);
#elif VRAMSCOPE_FRAMES >= 312
    return f->owner != kOwnedByCStack;
#else
    (void)f;
    return true;
#endif
}

PyCodeObject* code_of(const InterpreterFrame* f) {
#if VRAMSCOPE_FRAMES >= 313
    return reinterpret_cast<PyCodeObject*>(f->f_executable);
#else
    return f->f_code;
#endif
}

const void* instruction_of(const InterpreterFrame* f) {
#if VRAMSCOPE_FRAMES >= 313
    return f->instr_ptr;
#else
    return f->prev_instr;
#endif
}

// The bytes of a frame the hashed walk reads (up to 3.12, all of them): the trail asks for the
// lines they span, not the frame's first.
#if VRAMSCOPE_FRAMES >= 313
constexpr size_t kReadFrom = offsetof(InterpreterFrame, f_executable), kReadTo = offsetof(InterpreterFrame, owner) + 1;
#elif VRAMSCOPE_FRAMES >= 312
constexpr size_t kReadFrom = offsetof(InterpreterFrame, previous), kReadTo = offsetof(InterpreterFrame, owner) + 1;
#else
constexpr size_t kReadFrom = offsetof(InterpreterFrame, previous), kReadTo = offsetof(InterpreterFrame, prev_instr) + 8;
#endif

const char* first_instruction(const void* code) {
    return static_cast<const char*>(code) + offsetof(PyCodeObject, co_code_adaptive);
}

// Calls visited(frame, k) for the k-th of the innermost kWalkDepth frames, and took(frame) for
// each of them that runs code; returns how many were visited.
template <class V, class T>
size_t for_each_frame(V&& visited, T&& took) {
    // The thread's own state, from thread-local storage: no GIL needed to find it.
    PyThreadState* t = PyGILState_GetThisThreadState();
    if (!t) return 0;
    size_t k = 0;
    for (const InterpreterFrame* frame = current_frame(t); frame && k < kWalkDepth; frame = frame->previous, ++k) {
        visited(frame, k);
        if (runs_code(frame)) took(frame);
    }
    return k;
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

// A frame's offset is its instruction's from the code's first (negative for a frame still being
// set up: its line is then the function's first).
size_t walk_python_frames(RawFrame* out) {
    size_t n = 0;
#if VRAMSCOPE_FRAMES
    for_each_frame([](const InterpreterFrame*, size_t) {},
                   [&](const InterpreterFrame* f) {
                       const void* code = code_of(f);
                       out[n++] = RawFrame{code, static_cast<const char*>(instruction_of(f)) - first_instruction(code)};
                   });
#else
    (void)out;
#endif
    return n;
}

StackHasher hash_python_frames(FrameTrail& trail) {
    StackHasher h;
#if VRAMSCOPE_FRAMES
    for (size_t i = 0; i < trail.n; ++i) {  // one line, or two where the fields straddle them
        __builtin_prefetch(static_cast<const char*>(trail.at[i]) + kReadFrom);
        __builtin_prefetch(static_cast<const char*>(trail.at[i]) + kReadTo - 1);
    }
    trail.n = for_each_frame([&](const InterpreterFrame* f, size_t k) { trail.at[k] = f; },
                             [&](const InterpreterFrame* f) { h.add(instruction_of(f)); });
#else
    (void)trail;
#endif
    return h;
}

CodeInfo describe_code(const void* code) {
    auto* c = static_cast<PyCodeObject*>(const_cast<void*>(code));
    CodeInfo info;
    append_utf8(info.file, c->co_filename);
    // The qualified name says which class a method is of (`Net.forward`: the peak is told by module
    // from it, analysis/peak.h); the functions it was defined in (`main.<locals>.`) say nothing more
    // than the file and line do.
    append_utf8(info.function, c->co_qualname);
    constexpr std::string_view kLocals = "<locals>.";
    if (const size_t at = info.function.rfind(kLocals); at != std::string::npos) info.function.erase(0, at + kLocals.size());
    return info;
}

#if VRAMSCOPE_FRAMES == 311 || VRAMSCOPE_FRAMES == 312
namespace {
struct FrameObject {  // PyFrameObject's head (Include/internal/pycore_frame.h)
    PyObject_HEAD
    PyFrameObject* f_back;
    InterpreterFrame* f_frame;
};
constexpr unsigned char kFastCell = 0x40, kFastFree = 0x80;  // CO_FAST_CELL, CO_FAST_FREE
}  // namespace

PyObject* frame_locals(PyObject* frame) {
    if (!PyFrame_Check(frame)) {
        PyErr_SetString(PyExc_TypeError, "frame_locals: not a frame");
        return nullptr;
    }
    PyCodeObject* code = PyFrame_GetCode(reinterpret_cast<PyFrameObject*>(frame));
    const InterpreterFrame* f = reinterpret_cast<FrameObject*>(frame)->f_frame;
    PyObject* out = PyDict_New();
    const char* kinds = PyBytes_AS_STRING(code->co_localspluskinds);
    for (int i = 0; out && i < code->co_nlocalsplus; ++i) {
        PyObject* value = f->localsplus[i];
        if (value && (kinds[i] & (kFastCell | kFastFree)) && PyCell_Check(value)) value = PyCell_GET(value);
        if (value && PyDict_SetItem(out, PyTuple_GET_ITEM(code->co_localsplusnames, i), value) < 0) Py_CLEAR(out);
    }
    Py_DECREF(code);
    return out;
}
#else
PyObject* frame_locals(PyObject* frame) {
    PyObject* proxy = PyObject_GetAttrString(frame, "f_locals");  // 3.13 on: a proxy that keeps nothing
    if (!proxy) return nullptr;
    PyObject* out = PyDict_New();
    if (out && PyDict_Update(out, proxy) < 0) Py_CLEAR(out);
    Py_DECREF(proxy);
    return out;
}
#endif

uint32_t line_of(const void* code, int32_t offset) {
    const int line = PyCode_Addr2Line(static_cast<PyCodeObject*>(const_cast<void*>(code)), offset);
    return line > 0 ? uint32_t(line) : 0;
}

std::string self_check() {
    if (!python_frames_supported()) return "no frame reader for Python " PY_VERSION;
    RawFrame walked[kWalkDepth];
    const size_t n = walk_python_frames(walked);
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
#if VRAMSCOPE_FRAMES
    // The hook's walk, prefetching from the trail this thread's earlier checks left, hashes the same frames.
    static thread_local FrameTrail trail;
    StackHasher expected;
    for (size_t k = 0; k < n; ++k) expected.add(first_instruction(walked[k].code) + walked[k].offset);
    const StackKey hashed = hash_python_frames(trail).key(nullptr), want = expected.key(nullptr);
    if (problem.empty() && (hashed.hash != want.hash || hashed.check != want.check || hashed.frames != want.frames))
        problem = "the hashed walk differs from the walk (" + std::to_string(hashed.frames) + " frames hashed, " +
                  std::to_string(n) + " walked)";
#endif
    return problem;
}

}  // namespace vramscope::capture
