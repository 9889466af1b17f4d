// The Python face of the C++ core: the CLI, analysis and the live recorder cross here.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <mutex>
#include <set>

#include "analysis/analyze.h"
#include "analysis/steps.h"
#include "capture/python_frames.h"
#include "explain/reference_walk.h"
#include "capture/recorder.h"
#include "cli/cli.h"
#include "common/format.h"
#include "findings/json.h"
#include "importers/torch_snapshot.h"
#include "render/html.h"
#include "render/terminal.h"
#include "trace/writer.h"

namespace nb = nanobind;
using namespace vramscope;

namespace {
// The recorder the allocator hook feeds. Recorders are never destroyed while the process may
// still call this (Python keeps retired ones), so a racing callback never sees freed memory.
std::atomic<capture::Recorder*> g_active{nullptr};
}  // namespace

// The one entry point of the allocator hook (allocator_hook.cpp, built against the user's
// torch): kinds are EventKind values, stream the cudaStream_t, node the running autograd node.
extern "C" void vramscope_allocator_event(int kind, int device, uint64_t addr, uint64_t size, uint64_t stream,
                                          const char* node) {
    if (capture::Recorder* r = g_active.load(std::memory_order_acquire))
        r->allocator_event(EventKind(kind), uint8_t(device), addr, size, stream, node);
}

// What the live monitor said, as dicts Python reads without knowing C++ types.
static nb::list live_findings(const std::vector<LiveFinding>& found) {
    nb::list out;
    for (const LiveFinding& f : found) {
        nb::dict d;
        d["line"] = render_live(f);
        nb::dict site;
        site["file"] = f.site.file;
        site["line"] = f.site.line;
        site["function"] = f.site.function;
        d["site"] = site;
        d["device"] = f.device;
        d["shape"] = f.shape;
        d["evidence"] = f.evidence;
        d["bytes_per_step"] = f.bytes_per_step;
        d["since_step"] = f.since_step;
        d["projected_oom_step"] = f.projected_oom_step ? nb::cast(*f.projected_oom_step) : nb::none();
        d["blocks"] = f.newest_blocks;
        out.append(d);
    }
    return out;
}

NB_MODULE(_core, m) {
    m.attr("__version__") = VRAMSCOPE_VERSION;
    // Retired recorders are kept to the end on purpose (a late allocator callback may reach one):
    // nanobind would list them as leaks at exit, in the user's output.
    nb::set_leak_warnings(false);
    m.def(
        "cli_main",
        [](const std::vector<std::string>& args) {
            nb::gil_scoped_release release;
            return run_cli(args);
        },
        nb::arg("args"), "Run the vramscope command line; returns the exit code.");
    m.def(
        "analyze_json",
        [](const std::string& path, uint32_t window, int warmup, uint64_t device_memory) {
            nb::gil_scoped_release release;
            AnalysisOptions opt;
            opt.window = window;
            opt.warmup_steps = warmup;
            opt.device_memory = device_memory;
            return to_json(analyze_file(path, opt));
        },
        nb::arg("path"), nb::arg("window") = 1, nb::arg("warmup") = -1, nb::arg("device_memory") = 0,
        "Analyse a trace or torch snapshot; returns the findings JSON.");
    m.def(
        "convert",
        [](const std::string& in, const std::string& out) {
            nb::gil_scoped_release release;
            write_trace(load_any(in), out);
        },
        nb::arg("source"), nb::arg("destination"), "Convert a torch snapshot to a .vscope trace.");
    m.def(
        "summary",
        [](const std::string& path, uint64_t device_memory, bool color, int warmup) {
            nb::gil_scoped_release release;
            AnalysisOptions opt;
            opt.device_memory = device_memory;
            opt.warmup_steps = warmup;
            Findings f = analyze_file(path, opt);
            return std::make_pair(render_summary(f, color), to_json(f));
        },
        nb::arg("path"), nb::arg("device_memory") = 0, nb::arg("color") = false, nb::arg("warmup") = -1,
        "Analyse a trace; returns (terminal summary, findings JSON).");

    m.def(
        "frames",
        [](const std::string& path) {
            Trace t;
            {
                nb::gil_scoped_release release;
                t = load_any(path);
            }
            nb::list out;
            for (uint32_t i = 1; i <= t.stacks.frame_count(); ++i) {
                const Frame& f = t.stacks.frame(i);
                out.append(nb::make_tuple(std::string(t.stacks.string(f.file)), f.line,
                                          std::string(t.stacks.string(f.function))));
            }
            return out;
        },
        nb::arg("path"), "Every distinct stack frame of a trace or snapshot: (file, line, function).");

    // The vocabularies, as Python enums: values and names are the C++ ones, never copied by hand.
    nb::enum_<EventKind>(m, "EventKind")
        .value("alloc", EventKind::alloc).value("free_requested", EventKind::free_requested)
        .value("free_completed", EventKind::free_completed).value("segment_alloc", EventKind::segment_alloc)
        .value("segment_free", EventKind::segment_free).value("segment_map", EventKind::segment_map)
        .value("segment_unmap", EventKind::segment_unmap).value("oom", EventKind::oom)
        .value("step", EventKind::step).value("microbatch", EventKind::microbatch)
        .value("annotation_start", EventKind::annotation_start).value("annotation_end", EventKind::annotation_end)
        .value("snapshot", EventKind::snapshot).value("free", EventKind::free);
    // Python compares these with the JSON's spellings: str(Verdict.leak) is not "leak", `spelling` is.
    nb::enum_<Verdict>(m, "Verdict")
        .value("no_leak", Verdict::no_leak).value("leak", Verdict::leak).value("cannot_judge", Verdict::cannot_judge)
        .def_prop_ro("spelling", [](Verdict v) { return std::string(name(v)); });
    nb::enum_<Shape>(m, "Shape")
        .value("level", Shape::level).value("rising", Shape::rising).value("slowing", Shape::slowing)
        .value("bounded", Shape::bounded).value("warm_up", Shape::warm_up).value("too_short", Shape::too_short)
        .def_prop_ro("spelling", [](Shape s) { return std::string(name(s)); })
        .def_prop_ro("is_leak", [](Shape s) { return is_leak(s); });
    nb::enum_<NotLeakKind>(m, "NotLeakKind")
        .value("warm_up", NotLeakKind::warm_up).value("bounded_cache", NotLeakKind::bounded_cache)
        .value("fragmentation", NotLeakKind::fragmentation).value("activation_peaks", NotLeakKind::activation_peaks)
        .value("cached_free", NotLeakKind::cached_free).value("before_trace", NotLeakKind::before_trace)
        .def_prop_ro("spelling", [](NotLeakKind k) { return std::string(name(k)); });
    nb::enum_<LeakEvidence>(m, "LeakEvidence")
        .value("survivors", LeakEvidence::survivors).value("replaced_bigger", LeakEvidence::replaced_bigger)
        .def_prop_ro("spelling", [](LeakEvidence e) { return std::string(name(e)); });
    nb::enum_<LedgerPart>(m, "LedgerPart")
        .value("leak", LedgerPart::leak).value("bounded_cache", LedgerPart::bounded_cache)
        .value("warm_up", LedgerPart::warm_up).value("variation", LedgerPart::variation)
        .value("before_trace", LedgerPart::before_trace).value("unexplained", LedgerPart::unexplained)
        .def_prop_ro("spelling", [](LedgerPart p) { return std::string(name(p)); });
    nb::enum_<StepsSource>(m, "StepsSource")
        .value("markers", StepsSource::markers).value("optimizer_annotations", StepsSource::optimizer_annotations)
        .value("optimizer_frames", StepsSource::optimizer_frames).value("inferred_period", StepsSource::inferred_period)
        .value("none", StepsSource::none)
        .def_prop_ro("spelling", [](StepsSource s) { return std::string(name(s)); });

    using capture::Recorder;
    nb::class_<Recorder>(m, "Recorder", "One live capture into a .vscope file (capture/recorder.h).")
        .def(nb::init<const std::string&>(), nb::arg("path"))
        .def("meta", [](Recorder& r, const std::string& k, const std::string& v) { r.meta(k, v); })
        .def("device", &Recorder::device, nb::arg("device"), nb::arg("total_memory"), nb::arg("allocated"),
             nb::arg("reserved"))
        .def("name_stream", [](Recorder& r, uint64_t handle, const std::string& label) { r.name_stream(handle, label); })
        .def("marker", [](Recorder& r, EventKind kind, const std::string& name) { r.marker(kind, name); })
        .def("end_step", [](Recorder& r, const std::string& unit) { return live_findings(r.end_step(unit)); },
             nb::arg("unit") = std::string(kUnnamedStepUnit),
             "Ends a step of this unit (its marker's name: 'optimizer step', 'eval batch', ...); returns what "
             "the live monitor confirmed or withdrew: [{line, site, device, shape, bytes_per_step, since_step, "
             "projected_oom_step, blocks}].")
        .def("leaking", [](Recorder& r) { return live_findings(r.leaking()); },
             "The live monitor's last word: the sites it holds as leaking now (same dicts as end_step).")
        .def("set_python_stacks", &Recorder::set_python_stacks)
        .def("event",
             [](Recorder& r, EventKind kind, int device, uint64_t addr, uint64_t size) {
                 r.allocator_event(kind, uint8_t(device), addr, size, 0, nullptr);
             },
             nb::arg("kind"), nb::arg("device"), nb::arg("addr"), nb::arg("size"),
             nb::call_guard<nb::gil_scoped_release>(),
             "An event from a source other than the allocator hook (the live tensors of a CPU run), "
             "stacked from the calling thread's Python frames as the hook's are.")
        .def_prop_ro("projected_oom_step", &Recorder::projected_oom_step,
                     "The step at which a device runs out at the recent rates of the leaks held now; None "
                     "without a leak or a capacity.")
        .def("flush", &Recorder::flush, nb::call_guard<nb::gil_scoped_release>())
        .def("close", &Recorder::close, nb::call_guard<nb::gil_scoped_release>())
        .def("abandon", &Recorder::abandon)
        .def("fault", &Recorder::fault)
        .def_prop_ro("allocations", &Recorder::allocations)
        .def_prop_ro("steps", &Recorder::steps)
        .def_prop_ro("path", &Recorder::path)
        .def("activate", [](Recorder& r) { g_active.store(&r, std::memory_order_release); },
             "Make this the recorder the allocator hook feeds.")
        .def("deactivate", [](Recorder& r) {
            capture::Recorder* self = &r;
            g_active.compare_exchange_strong(self, nullptr);
        });
    m.def("allocator_sink", [] { return uint64_t(reinterpret_cast<uintptr_t>(&vramscope_allocator_event)); },
          "Address of the C function the allocator hook calls.");
    m.def(
        "feed_allocator_event",
        [](EventKind kind, int device, uint64_t addr, uint64_t size, uint64_t stream, const std::string& node) {
            // What the hook does, from Python, with the GIL released as torch releases it: lets tests
            // drive the whole capture path on a machine without a GPU. Node names are interned
            // because the recorder keys them by pointer, as the hook's are stable.
            static std::mutex names_mutex;
            static std::set<std::string> names;
            const char* name = nullptr;
            if (!node.empty()) {
                std::lock_guard lock(names_mutex);
                name = names.insert(node).first->c_str();
            }
            nb::gil_scoped_release release;
            vramscope_allocator_event(int(kind), device, addr, size, stream, name);
        },
        nb::arg("kind"), nb::arg("device"), nb::arg("addr"), nb::arg("size"), nb::arg("stream") = 0,
        nb::arg("node") = "");
    m.def("format_bytes", &format_bytes, nb::arg("bytes"), "Bytes as vramscope spells them: '36.0 MiB'.");
    m.def("report_page", [](const std::string& data) { return report_page(data); }, nb::arg("data_json"),
          "The HTML report around its data JSON (render/html.h).");
    m.def(
        "parse_bytes",
        [](const std::string& text) {
            uint64_t bytes = 0;
            if (!parse_bytes(text, bytes)) throw nb::value_error(("not a size: '" + text + "' (e.g. 80GiB)").c_str());
            return bytes;
        },
        "A size such as 80GiB or 81559MiB in bytes.");
    m.def("python_frames_self_check", &capture::self_check,
          "Compare the GIL-free frame walk with the interpreter's; empty when they agree.");
    m.def("python_frames_supported", &capture::python_frames_supported);
    m.def(
        "reference_walk",
        [](nb::list roots, nb::object targets, nb::tuple extra_types, nb::callable callback, nb::object skip,
           Py_ssize_t max_paths, double seconds) {
            PyObject* r = explain::reference_walk(roots.ptr(), targets.ptr(), extra_types.ptr(), callback.ptr(),
                                                  skip.ptr(), max_paths, seconds);
            if (!r) throw nb::python_error();
            return nb::steal(r);
        },
        "Breadth-first search of the object graph (explain/reference_walk.h): [(root label, [objects])].");
}
