#include "owners/reference_walk.h"

#include <chrono>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace vramscope::explain {
namespace {

struct Walk {
    struct From {
        PyObject* parent;  // null for a root
        Py_ssize_t root;   // index of the root it was reached from
    };
    std::unordered_map<PyObject*, From> from;
    std::vector<PyObject*> held;  // every object entered, with a reference: ids stay unique
    std::unordered_set<uintptr_t> targets, skip;
    std::unordered_map<PyTypeObject*, bool> extra_by_type;
    std::vector<PyObject*> children;
};

int collect(PyObject* child, void* arg) {
    if (child) static_cast<Walk*>(arg)->children.push_back(child);
    return 0;
}

PyObject* chain_to(Walk& w, PyObject* parent, PyObject* target) {
    std::vector<PyObject*> chain{target};
    for (PyObject* o = parent; o; o = w.from[o].parent) chain.push_back(o);
    PyObject* list = PyList_New(Py_ssize_t(chain.size()));
    if (!list) return nullptr;
    for (size_t i = 0; i < chain.size(); ++i) {
        PyObject* o = chain[chain.size() - 1 - i];
        Py_INCREF(o);
        PyList_SET_ITEM(list, Py_ssize_t(i), o);
    }
    return list;
}

}  // namespace

PyObject* reference_walk(PyObject* roots, PyObject* targets, PyObject* extra_types, PyObject* callback,
                         PyObject* skip, Py_ssize_t max_paths, double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    Walk w;
    auto fill = [](PyObject* set, std::unordered_set<uintptr_t>& out) -> bool {
        PyObject* it = PyObject_GetIter(set);
        if (!it) return false;
        while (PyObject* item = PyIter_Next(it)) {
            out.insert(uintptr_t(PyLong_AsVoidPtr(item)));
            Py_DECREF(item);
        }
        Py_DECREF(it);
        return !PyErr_Occurred();
    };
    if (!fill(targets, w.targets) || !fill(skip, w.skip)) return nullptr;
    PyObject* found = PyList_New(0);
    if (!found) return nullptr;
    const Py_ssize_t nroots = PyList_Size(roots);
    if (nroots < 0) {
        Py_DECREF(found);
        return nullptr;
    }

    std::vector<PyObject*> level, next;
    bool failed = false;
    // Reaching `child` from `parent` (null: a root): a target ends a path, anything else is queued.
    auto reach = [&](PyObject* child, PyObject* parent, Py_ssize_t root) {
        if (w.targets.count(uintptr_t(child))) {
            PyObject* chain = chain_to(w, parent, child);
            PyObject* label = PyTuple_GET_ITEM(PyList_GET_ITEM(roots, root), 0);
            PyObject* entry = chain ? PyTuple_Pack(2, label, chain) : nullptr;
            Py_XDECREF(chain);
            if (!entry || PyList_Append(found, entry) < 0) failed = true;
            Py_XDECREF(entry);
            return;
        }
        if (w.skip.count(uintptr_t(child)) || w.from.count(child)) return;
        w.from.emplace(child, Walk::From{parent, root});
        Py_INCREF(child);
        w.held.push_back(child);
        next.push_back(child);
    };
    for (Py_ssize_t i = 0; i < nroots && !failed; ++i) reach(PyTuple_GET_ITEM(PyList_GET_ITEM(roots, i), 1), nullptr, i);

    size_t visited = 0;
    while (!failed && !next.empty() && PyList_GET_SIZE(found) == 0) {
        level.swap(next);
        next.clear();
        // A whole level, so every path as short as the first one found is found.
        for (PyObject* o : level) {
            if (failed || PyList_GET_SIZE(found) >= max_paths) break;
            if (++visited % 4096 == 0 && std::chrono::steady_clock::now() > deadline) {
                next.clear();
                break;
            }
            const Py_ssize_t root = w.from[o].root;
            w.children.clear();
            if (PyObject_IS_GC(o) && Py_TYPE(o)->tp_traverse) Py_TYPE(o)->tp_traverse(o, collect, &w);
            auto [extra, inserted] = w.extra_by_type.try_emplace(Py_TYPE(o), false);
            if (inserted) extra->second = PyObject_IsInstance(o, extra_types) == 1;
            PyObject* more = nullptr;
            if (extra->second) {
                more = PyObject_CallOneArg(callback, o);
                if (!more) {
                    PyErr_Clear();  // an object whose attributes raise holds nothing we can name
                } else if (PyObject* it = PyObject_GetIter(more)) {
                    while (PyObject* child = PyIter_Next(it)) {
                        w.children.push_back(child);
                        w.held.push_back(child);  // keeps the new reference: callbacks may make objects
                    }
                    Py_DECREF(it);
                    PyErr_Clear();
                } else {
                    PyErr_Clear();
                }
            }
            // Copy: reach() may run Python (errors aside, no), but children must outlive the loop.
            const std::vector<PyObject*> children = w.children;
            for (PyObject* child : children) {
                reach(child, o, root);
                if (failed || PyList_GET_SIZE(found) >= max_paths) break;
            }
            Py_XDECREF(more);
        }
    }
    for (PyObject* o : w.held) Py_DECREF(o);
    if (failed) {
        Py_DECREF(found);
        return nullptr;
    }
    return found;
}

}  // namespace vramscope::explain
