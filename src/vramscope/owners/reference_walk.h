// Breadth-first search over the Python object graph, in C++: the part of who_holds() that visits
// a million objects. Edges are what the interpreter's own tp_traverse reports (what gc sees),
// plus, for objects of the types the caller names, whatever its Python callback returns (the
// autograd graph lives in C++ where gc cannot see it). Returns the object chains; naming each
// hop ("[3]", ".logits") is left to Python, which does it for a handful of objects.
#pragma once
#define PY_SSIZE_T_CLEAN
#include <Python.h>

namespace vramscope::explain {

// roots: list of (label, object); targets: set of ints (ids); extra_types: tuple of types whose
// objects also get callback(obj) -> iterable of children; skip: set of ids never entered (module
// dicts: their entries are roots already). Returns a list of (root_label, [obj, ..., target]):
// up to max_paths, none longer than the first found; stops at the deadline (seconds).
PyObject* reference_walk(PyObject* roots, PyObject* targets, PyObject* extra_types, PyObject* callback,
                         PyObject* skip, Py_ssize_t max_paths, double seconds);

}  // namespace vramscope::explain
