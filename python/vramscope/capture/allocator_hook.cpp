// The only code of vramscope that touches torch's C++ API. Built on first use against the user's
// own torch (torch.utils.cpp_extension.load, cached), it attaches to the CUDA caching allocator and
// forwards each trace entry to vramscope's recorder in _core through one C function pointer.
//
// The callback runs under the allocator's lock, usually without the GIL: it must not call into
// Python, and it must be cheap. It adds only what the recorder cannot see itself: which autograd
// node the engine is running on this thread (backward allocations have no Python frame).
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Type.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/python_function.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <typeinfo>
#include <unordered_map>

#include "events/event.h"

namespace {

using c10::cuda::CUDACachingAllocator::TraceEntry;
using Sink = void (*)(int kind, int device, uint64_t addr, uint64_t size, uint64_t stream, const char* node);
std::atomic<Sink> g_sink{nullptr};

// torch's action as vramscope's EventKind (events/event.h, installed beside this file); -1: not recorded.
int kind_of(TraceEntry::Action a) {
    using vramscope::EventKind;
    switch (a) {
    case TraceEntry::ALLOC: return int(EventKind::alloc);
    case TraceEntry::FREE_REQUESTED: return int(EventKind::free_requested);
    case TraceEntry::FREE_COMPLETED: return int(EventKind::free_completed);
    case TraceEntry::SEGMENT_ALLOC: return int(EventKind::segment_alloc);
    case TraceEntry::SEGMENT_FREE: return int(EventKind::segment_free);
    case TraceEntry::SEGMENT_MAP: return int(EventKind::segment_map);
    case TraceEntry::SEGMENT_UNMAP: return int(EventKind::segment_unmap);
    case TraceEntry::OOM: return int(EventKind::oom);
    case TraceEntry::SNAPSHOT: return int(EventKind::snapshot);
    default: return -1;
    }
}

// A custom Function's node points at its Python object (the ctx, of class "<Name>Backward"):
// torch up to 2.12 as the member `obj`, later through pyobj().
template <class T>
auto python_object(const T& n, int) -> decltype(n.obj) { return n.obj; }
template <class T>
auto python_object(const T& n, long) -> decltype(n.pyobj()) { return n.pyobj(); }

// Node names by type, kept for the life of the process so the recorder may key on the pointer.
// name() itself is not used: for Python nodes it takes the GIL, which here could deadlock. PyNode
// is told by its type's name: its typeinfo lives in libtorch_python, which this is not linked to.
struct NodeType {
    bool python;
    std::string name;
};
std::mutex g_names_mutex;
std::unordered_map<const std::type_info*, NodeType> g_node_types;
std::unordered_map<const void*, std::string> g_python_names;

// What a thread looked up last per slot: backward allocates under a few dozen node types, and the
// shared tables above cost a lock and two lookups each time. Trivially constructed: no TLS guard.
struct NameSlot {
    const void* type;     // std::type_info, or for a PyNode its ctx's Python type
    const char* name;     // null for a PyNode's C++ type: its name is its ctx's type's
};
constexpr size_t kNameSlots = 64;
thread_local NameSlot t_names[kNameSlots];

size_t slot_of(const void* key) { return (reinterpret_cast<uintptr_t>(key) >> 4) * 0x9E3779B97F4A7C15ull >> 58; }

const NodeType& node_type(const std::type_info& type) {
    std::lock_guard<std::mutex> lock(g_names_mutex);
    auto it = g_node_types.find(&type);
    if (it == g_node_types.end()) {
        std::string name = c10::demangle(type.name());
        const bool python = name == "torch::autograd::PyNode";
        const size_t colon = name.rfind("::");
        if (colon != std::string::npos) name = name.substr(colon + 2);
        it = g_node_types.emplace(&type, NodeType{python, std::move(name)}).first;
    }
    return it->second;
}

const char* python_name(const void* py_type, PyObject* obj) {
    std::lock_guard<std::mutex> lock(g_names_mutex);
    auto it = g_python_names.find(py_type);
    if (it == g_python_names.end()) it = g_python_names.emplace(py_type, py_type ? Py_TYPE(obj)->tp_name : "PyNode").first;
    return it->second.c_str();
}

const char* node_name() {
    auto node = torch::autograd::get_current_node();
    if (!node) return nullptr;
    const torch::autograd::Node& n = *node;
    const std::type_info& type = typeid(n);
    NameSlot& slot = t_names[slot_of(&type)];
    if (slot.type != &type) {
        const NodeType& known = node_type(type);
        slot = NameSlot{&type, known.python ? nullptr : known.name.c_str()};
    }
    if (slot.name) return slot.name;
    PyObject* obj = python_object(static_cast<const torch::autograd::PyNode&>(n), 0);
    const void* py_type = obj ? static_cast<const void*>(Py_TYPE(obj)) : nullptr;
    NameSlot& py_slot = t_names[slot_of(py_type)];
    if (py_slot.type != py_type || !py_slot.name) py_slot = NameSlot{py_type, python_name(py_type, obj)};
    return py_slot.name;
}

void on_trace_entry(const TraceEntry& e) {
    const Sink sink = g_sink.load(std::memory_order_acquire);
    if (!sink) return;
    const int kind = kind_of(e.action_);
    if (kind < 0) return;
    const bool freeing = kind == int(vramscope::EventKind::free_requested) || kind == int(vramscope::EventKind::free_completed);
    sink(kind, int(e.device_), uint64_t(e.addr_), uint64_t(e.size_),
         uint64_t(reinterpret_cast<uintptr_t>(e.stream_)), freeing ? nullptr : node_name());
}

// torch has no way to detach a tracker: attach once per process, and let `sink` say whether
// anyone listens. Call after CUDA is initialised (the per-device allocators exist only then).
void install(uint64_t sink) {
    static std::once_flag attached;
    std::call_once(attached, [] { c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker(on_trace_entry); });
    g_sink.store(reinterpret_cast<Sink>(static_cast<uintptr_t>(sink)), std::memory_order_release);
}

void uninstall() { g_sink.store(nullptr, std::memory_order_release); }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("install", &install, "Forward allocator events to the C function at this address.");
    m.def("uninstall", &uninstall, "Stop forwarding (the tracker stays attached, idle).");
}
