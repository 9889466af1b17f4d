// The Python face of the C++ core: the commands, analysis and the live recorder cross here.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>

#include "analysis/analyze.h"
#include "analysis/judge.h"
#include "analysis/live_sink.h"
#include "analysis/steps.h"
#include "analysis/within_step.h"
#include "capture/driver_calls.h"
#include "capture/python_frames.h"
#include "owners/reference_walk.h"
#include "capture/recorder.h"
#include "cli/cli.h"
#include "cli/options.h"
#include "common/format.h"
#include "compare/cells.h"
#include "compare/table.h"
#include "findings/json.h"
#include "importers/torch_snapshot.h"
#include "findings/json_reader.h"
#include "render/terminal.h"

namespace nb = nanobind;
using namespace vramscope;

namespace {
// The recorder the allocator hook feeds. Recorders are never destroyed while the process may
// still call this (Python keeps retired ones), so a racing callback never sees freed memory.
std::atomic<capture::Recorder*> g_active{nullptr};

// A live capture as Python drives it: the recorder, which records, and the live monitor it feeds,
// which judges. The monitor is declared first so it outlives the recorder's worker thread.
struct LiveCapture {
    LiveSink monitor;
    capture::Recorder recorder;
    std::mutex events_mutex;  // event(): one call at a time, as the recorder asks of every source
    LiveCapture(const std::string& path, const JudgeSettings& settings) : monitor(settings), recorder(path) {
        recorder.add_sink(&monitor);
        // At the first judged step end, which the usage ledger's context is read at: with the
        // default warm-up, any of the first kWarmupSteps + 1 (fewer in runs too short to judge);
        // never the first step end of a trace that starts mid-run (its step is cut short).
        if (settings.warmup >= 0)
            recorder.read_usage_at_step_ends(uint64_t(settings.warmup), std::max<uint64_t>(uint64_t(settings.warmup), 1));
        else
            recorder.read_usage_at_step_ends(0, kWarmupSteps);
    }
};
}  // namespace

// The one entry point of the allocator hook (allocator_hook.cpp, built against the user's
// torch): kinds are EventKind values, stream the cudaStream_t, node the running autograd node.
extern "C" [[gnu::hot]] void vramscope_allocator_event(int kind, int device, uint64_t addr, uint64_t size, uint64_t stream,
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
        if (f.allocated_in) {
            nb::dict in;
            in["file"] = f.allocated_in->file;
            in["line"] = f.allocated_in->line;
            in["function"] = f.allocated_in->function;
            d["allocated_in"] = in;
        } else {
            d["allocated_in"] = nb::none();
        }
        d["memory"] = std::string(name(f.memory));
        d["library"] = f.library;
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

namespace {

// The vocabularies first: the functions below take and give them.
void bind_vocabulary(nb::module_& m) {
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
        .value("pool_in_use", LeakEvidence::pool_in_use)
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
    nb::enum_<Memory>(m, "Memory")
        .value("torch", Memory::torch).value("external", Memory::external).value("pinned", Memory::pinned)
        .def_prop_ro("spelling", [](Memory k) { return std::string(name(k)); });

}

// The command line and the typed functions behind it (cli/).
void bind_commands(nb::module_& m) {
    // The command line's options and commands (cli/options.h): python/vramscope/commands/ builds
    // its parsers from these and hands each option's text back to be typed, once, here.
    nb::exception<UsageError>(m, "UsageError", PyExc_ValueError);
    m.def("commands", [] {
        nb::list out;
        for (const Command& c : commands()) {
            nb::list taken;
            for (const std::string& name : c.options) {
                const Option& o = option_of(c, name);
                nb::dict d;
                d["name"] = o.name, d["alias"] = o.alias, d["value"] = o.value, d["help"] = o.help;
                d["required"] = std::find(c.required.begin(), c.required.end(), name) != c.required.end();
                taken.append(d);
            }
            nb::dict d;
            d["name"] = c.name, d["inputs"] = c.inputs, d["summary"] = c.summary, d["options"] = taken;
            out.append(d);
        }
        return out;
    }, "The core's commands: [{name, inputs, summary, options: [{name, alias, value, help, required}]}].");
    nb::class_<CommandOptions>(m, "CommandOptions", "What a command's options set, typed (cli/options.h).")
        .def(nb::init<>())
        .def_prop_rw("device_memory", [](const CommandOptions& o) { return o.analysis.device_memory; },
                     [](CommandOptions& o, uint64_t bytes) { o.analysis.device_memory = bytes; })
        .def_prop_ro("warmup", [](const CommandOptions& o) { return o.analysis.judged_from(); },
                     "The steps the analysis leaves unjudged at the start: --warmup, or --steps' first; -1: the "
                     "judge's default (what a run's capture reads NVML at the end of, and its live monitor skips).")
        .def_rw("json", &CommandOptions::json)
        .def_rw("html", &CommandOptions::html)
        .def_rw("markdown", &CommandOptions::markdown)
        .def_rw("fail_on_leak", &CommandOptions::fail_on_leak)
        .def_rw("skip_empty", &CommandOptions::skip_empty);
    m.def(
        "parse_options",
        [](const std::string& command_name, const std::vector<std::pair<std::string, std::string>>& given) {
            const Command& c = command(command_name);
            CommandOptions options;
            for (const auto& [name, value] : given) apply_option(c, options, name, value);
            return options;
        },
        nb::arg("command"), nb::arg("given"),
        "Options as typed: [(option, text)] in the order given; UsageError naming the one that is wrong.");
    m.def(
        "run_command",
        [](const std::string& command_name, const std::vector<std::string>& inputs, const CommandOptions& options) {
            nb::gil_scoped_release release;
            return run_command(command(command_name), inputs, options);
        },
        nb::arg("command"), nb::arg("inputs"), nb::arg("options"),
        "Runs a core command (its output to stdout); returns its exit code.");
    m.def("size_with_unit", &size_with_unit, nb::arg("text"), nb::arg("option"), nb::arg("min") = 1,
          nb::arg("max") = UINT64_MAX, "A size with its unit (80GiB) in bytes; UsageError naming `option` otherwise.");
    nb::class_<Analysis>(m, "Analysis", "Inputs judged together: their findings, owners joined (cli/cli.h).")
        .def_ro("files", &Analysis::files)
        .def("terminal", &render_terminal, nb::arg("color") = false)
        .def("json", &findings_json)
        .def("report", &render_report)
        .def("exit_code", &exit_code, nb::arg("fail_on_leak"))
        .def("write_outputs", &write_outputs, nb::arg("options"), nb::arg("color") = false,
             nb::call_guard<nb::gil_scoped_release>(),
             "Writes the report page and findings JSON the options name; returns the terminal's text.");
    m.def("analyze", &analyze_inputs, nb::arg("files"), nb::arg("options") = CommandOptions(),
          nb::call_guard<nb::gil_scoped_release>(),
          "Traces or snapshots analysed, each joined to its owners (TRACE.owners.json).");
    m.def("findings_of", &findings_of, nb::arg("path"), nb::arg("options") = CommandOptions(),
          nb::call_guard<nb::gil_scoped_release>(),
          "One input's findings: a findings JSON read back, else a trace or snapshot analysed, owners joined.");
    m.def(
        "diff_texts",
        [](const std::string& a, const std::string& b, const CommandOptions& options) {
            nb::gil_scoped_release release;
            const RunDiff d = diff_inputs(a, b, options);
            return std::pair(render_diff_terminal(d, false), render_diff_json(d));
        },
        nb::arg("a"), nb::arg("b"), nb::arg("options") = CommandOptions(),
        "`vramscope diff A B` as (the terminal's text, its JSON), nothing written.");
    m.def(
        "compare_table_texts",
        [](const std::string& results) {
            nb::gil_scoped_release release;
            const CompareRun run = read_compare(results);
            return std::pair(render_compare_terminal(run), render_compare_json(run));
        },
        nb::arg("results"), "A compare run's table (OUT/compare.json) as (the terminal's text, its JSON), nothing written.");
    m.def(
        "read_findings",
        [](const std::string& text, const std::string& name) {
            FindingsFile file = read_findings(text, name);
            Analysis a;
            a.files.assign(file.runs.size(), name);
            a.runs = std::move(file.runs);
            a.ranks = std::move(file.ranks);
            return a;
        },
        nb::arg("text"), nb::arg("name"), "A findings JSON read back, through the one reader.");
    m.def(
        "attach_owners",
        [](const std::string& findings, const std::string& owners) {
            Findings f = read_findings(findings, "findings").runs.at(0);
            attach_owners(f, owners, "owners");
            return to_json(f);
        },
        nb::arg("findings_json"), nb::arg("owners_json"),
        "One run's findings JSON with each leak's owners joined (findings/json_reader.h attach_owners).");
    m.def(
        "convert",
        [](const std::string& in, const std::string& out, const CommandOptions& options) {
            nb::gil_scoped_release release;
            return convert(in, out, options);
        },
        nb::arg("source"), nb::arg("destination"), nb::arg("options") = CommandOptions(),
        "Convert a torch snapshot to a .vscope trace; returns what it wrote.");
    m.def("terminal_safe", [](const std::string& text, bool keep_newlines) { return terminal_safe(text, keep_newlines); },
          nb::arg("text"), nb::arg("keep_newlines") = false,
          "Text from a file or the user, safe to print: control characters shown as escapes.");
    m.def("format_bytes", &format_bytes, nb::arg("bytes"), "Bytes as vramscope spells them: '36.0 MiB'.");
    m.def("unit_of_marker", [](const std::string& marker) { return std::string(unit_of_marker(marker)); },
          nb::arg("marker"), "What a unit marker's units are called: 'microbatch' for a backward's.");
}

// The judge's settings and the analysis of one trace (analysis/).
void bind_analysis(nb::module_& m) {
    nb::class_<JudgeSettings>(m, "JudgeSettings",
                              "Window, warm-up and minimum steps: one struct for the live monitor, the analysis "
                              "of a trace and a capture's analysis at its end (analysis/settings.h).")
        .def(nb::init<>())
        .def_rw("window", &JudgeSettings::window)
        .def_rw("warmup", &JudgeSettings::warmup, "steps never judged at the start; -1: the judge's default")
        .def_rw("min_steps", &JudgeSettings::min_steps)
        .def("check", &JudgeSettings::check, "Raises ValueError naming a setting out of range.")
        .def_static("warmup_for_judged", &JudgeSettings::warmup_for_judged, nb::arg("judged"),
                    "The default warm-up of a run made to judge this many steps after it (a test's check).");
    m.def(
        "analyze_json",
        [](const std::string& path, const JudgeSettings& settings, uint64_t device_memory) {
            nb::gil_scoped_release release;
            AnalysisOptions opt;
            opt.judge = settings;
            opt.device_memory = device_memory;
            return to_json(analyze_file(path, opt), ReadLimits{}.max_held_bytes);
        },
        nb::arg("path"), nb::arg("settings") = JudgeSettings{}, nb::arg("device_memory") = 0,
        "Analyse a trace or torch snapshot; returns the findings JSON.");
    m.def(
        "summary",
        [](const std::string& path, uint64_t device_memory, bool color, const JudgeSettings& settings) {
            nb::gil_scoped_release release;
            AnalysisOptions opt;
            opt.device_memory = device_memory;
            opt.judge = settings;
            Findings f = analyze_file(path, opt);
            return std::make_pair(render_summary(f, color), to_json(f, ReadLimits{}.max_held_bytes));
        },
        nb::arg("path"), nb::arg("device_memory") = 0, nb::arg("color") = false, nb::arg("settings") = JudgeSettings{},
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

}

// A live capture: the recorder and the live monitor it feeds, and the hook's entry.
void bind_capture(nb::module_& m) {
    nb::class_<LiveCapture>(m, "Recorder",
                            "One live capture into a .vscope file (capture/recorder.h), judged as it goes by the "
                            "live monitor it feeds (analysis/live_sink.h).")
        .def(nb::init<const std::string&, const JudgeSettings&>(), nb::arg("path"), nb::arg("settings") = JudgeSettings{})
        .def("meta", [](LiveCapture& c, const std::string& k, const std::string& v) { c.recorder.meta(k, v); })
        .def("device",
             [](LiveCapture& c, uint8_t device, uint64_t total_memory, uint64_t allocated, uint64_t reserved,
                uint64_t budget) {
                 c.recorder.device(device, total_memory, allocated, reserved);
                 if (budget) c.monitor.device(device, budget, 0);  // the monitor projects against it
             },
             nb::arg("device"), nb::arg("total_memory"), nb::arg("allocated"), nb::arg("reserved"),
             nb::arg("budget") = 0,
             "A device as it is (its capacity goes in the trace) and, with `budget`, the capacity the user "
             "gave (device_memory), which the live monitor projects the OOM step against instead.")
        .def("name_stream",
             [](LiveCapture& c, uint64_t handle, const std::string& label) { c.recorder.name_stream(handle, label); })
        .def("marker", [](LiveCapture& c, EventKind kind, const std::string& name) { c.recorder.marker(kind, name); })
        .def("end_step",
             [](LiveCapture& c, const std::string& unit,
                const std::vector<std::tuple<uint8_t, std::string, uint64_t, uint64_t>>& pools) {
                 std::vector<capture::PoolReading> readings;
                 for (const auto& [device, library, in_use, pool] : pools)
                     readings.push_back(capture::PoolReading{device, library, in_use, pool});
                 c.recorder.end_step(unit, readings);
                 return live_findings(c.monitor.take_said());
             },
             nb::arg("unit") = std::string(kUnnamedStepUnit),
             nb::arg("pools") = std::vector<std::tuple<uint8_t, std::string, uint64_t, uint64_t>>{},
             "Ends a step of this unit (its marker's name: 'optimizer step', 'eval batch', ...), queued: the "
             "worker thread drains it, with each library pool's reading at it (pools: (device, library as "
             "analysis/libraries.h spells it, bytes in use, the pool's bytes)). Returns what the live monitor confirmed or withdrew since the last call, "
             "at the step ends drained so far: [{line, site, device, shape, evidence, bytes_per_step, "
             "since_step, projected_oom_step, blocks}].")
        .def("said",
             [](LiveCapture& c) {
                 c.recorder.drain();
                 return live_findings(c.monitor.take_said());
             },
             "What the live monitor confirmed or withdrew since the last call, every step end so far drained "
             "first (same dicts as end_step).")
        .def("leaking",
             [](LiveCapture& c) {
                 c.recorder.drain();
                 return live_findings(c.monitor.leaking());
             },
             "The live monitor's last word: the sites it holds as leaking now (same dicts as end_step).")
        .def("rising_in_step",
             [](LiveCapture& c, const std::string& unit_marker) {
                 c.recorder.drain();
                 const std::vector<LiveFinding> rising = c.monitor.rising_in_step();
                 nb::list out = live_findings(rising);
                 for (size_t i = 0; i < rising.size(); ++i)
                     nb::cast<nb::dict>(out[i])["line"] = render_live_within_step(rising[i], unit_of_marker(unit_marker));
                 return out;
             },
             nb::arg("unit_marker"),
             "The sites whose bytes rose across the units of the run in hand as a leak does (same dicts as "
             "end_step; bytes_per_step is per unit, projected_oom_step the unit count at which the device "
             "runs out): asked at the highest point, its last unit's end. unit_marker names the units.")
        .def("set_python_stacks", [](LiveCapture& c, bool on) { c.recorder.set_python_stacks(on); })
        .def("event",
             [](LiveCapture& c, EventKind kind, int device, uint64_t addr, uint64_t size) {
                 std::lock_guard lock(c.events_mutex);
                 c.recorder.allocator_event(kind, uint8_t(device), addr, size, 0, nullptr);
             },
             nb::arg("kind"), nb::arg("device"), nb::arg("addr"), nb::arg("size"),
             nb::call_guard<nb::gil_scoped_release>(),
             "An event from a source other than the allocator hook (the live tensors of a CPU run), "
             "stacked from the calling thread's Python frames as the hook's are.")
        .def("start_driver_capture",
             [](LiveCapture& c, const std::vector<std::string>& cupti_dirs) {
                 return capture::DriverCalls::instance().start(c.recorder, cupti_dirs);
             },
             nb::arg("cupti_dirs"), nb::call_guard<nb::gil_scoped_release>(),
             "Records memory taken from the CUDA driver outside torch's allocator, and pinned host memory, "
             "through CUPTI (capture/driver_calls.h), looked for in `cupti_dirs` first. '' when on, else why not.")
        .def("stop_driver_capture", [](LiveCapture& c) { capture::DriverCalls::instance().stop(c.recorder); },
             nb::call_guard<nb::gil_scoped_release>(),
             "Lets go of CUPTI (a profiler may take it then); nothing if it feeds another capture.")
        .def("watch_device",
             [](LiveCapture& c, int device, const std::string& pci_bus_id) {
                 return c.recorder.watch_device(uint8_t(device), pci_bus_id);
             },
             nb::arg("device"), nb::arg("pci_bus_id"), nb::call_guard<nb::gil_scoped_release>(),
             "NVML's figure for this process on a CUDA device (found by PCI bus id, 'dddddddd:bb:dd.f'), written "
             "now, before each step marker and at the end. '' when watched, else why not.")
        .def_prop_ro("nvml_state", [](const LiveCapture& c) { return c.recorder.usage_state(); },
                     "For the meta 'capture.nvml': 'on', 'on (device total: one process)' or 'off: why'.")
        .def_prop_ro("projected_oom_step", [](const LiveCapture& c) { return c.monitor.projected_oom_step(); },
                     "The step at which a device runs out at the recent rates of the leaks held now; None "
                     "without a leak or a capacity.")
        .def("flush", [](LiveCapture& c) { c.recorder.flush(); }, nb::call_guard<nb::gil_scoped_release>())
        .def("close", [](LiveCapture& c) { c.recorder.close(); }, nb::call_guard<nb::gil_scoped_release>())
        .def("abandon", [](LiveCapture& c) { c.recorder.abandon(); })
        .def("fault", [](const LiveCapture& c) { return c.recorder.fault(); })
        .def_prop_ro("allocations", [](LiveCapture& c) { return c.recorder.allocations(); })
        .def_prop_ro("steps", [](const LiveCapture& c) { return c.recorder.steps(); }, "Steps ended so far.")
        .def_prop_ro("path", [](const LiveCapture& c) { return c.recorder.path(); })
        .def("activate", [](LiveCapture& c) { g_active.store(&c.recorder, std::memory_order_release); },
             "Make this the recorder the allocator hook feeds.")
        .def("deactivate", [](LiveCapture& c) {
            capture::Recorder* self = &c.recorder;
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
            static std::mutex names_mutex, feed_mutex;  // feed_mutex: torch's allocator lock
            static std::set<std::string> names;
            const char* name = nullptr;
            if (!node.empty()) {
                std::lock_guard lock(names_mutex);
                name = names.insert(node).first->c_str();
            }
            nb::gil_scoped_release release;
            std::lock_guard lock(feed_mutex);
            vramscope_allocator_event(int(kind), device, addr, size, stream, name);
        },
        nb::arg("kind"), nb::arg("device"), nb::arg("addr"), nb::arg("size"), nb::arg("stream") = 0,
        nb::arg("node") = "");
    m.def("python_frames_self_check", &capture::self_check,
          "Compare the GIL-free frame walk with the interpreter's; empty when they agree.");
    m.def("python_frames_supported", &capture::python_frames_supported);
    m.def(
        "frame_locals",
        [](nb::handle frame) {
            PyObject* locals = capture::frame_locals(frame.ptr());
            if (!locals) throw nb::python_error();
            return nb::steal<nb::dict>(locals);
        },
        nb::arg("frame"),
        "A frame's locals as a new dict, leaving nothing on the frame (before Python 3.13, f_locals is a\n"
        "snapshot the frame keeps, with every object a local held when it was read).");
}

// Who holds a leak: the object graph walked in C++ (owners/).
void bind_explain(nb::module_& m) {
    m.def(
        "reference_walk",
        [](nb::list roots, nb::object targets, nb::tuple extra_types, nb::callable callback, nb::object skip,
           Py_ssize_t max_paths, double seconds) {
            PyObject* r = explain::reference_walk(roots.ptr(), targets.ptr(), extra_types.ptr(), callback.ptr(),
                                                  skip.ptr(), max_paths, seconds);
            if (!r) throw nb::python_error();
            return nb::steal(r);
        },
        "Breadth-first search of the object graph (owners/reference_walk.h): [(root label, [objects])].");
}

}  // namespace

NB_MODULE(_core, m) {
    m.attr("__version__") = VRAMSCOPE_VERSION;
    // The annotations a capture opens as the first forward and each backward begin (analysis/phases.h).
    m.attr("FIRST_FORWARD_ANNOTATION") = std::string(kFirstForwardAnnotation);
    m.attr("BACKWARD_ANNOTATION") = std::string(kBackwardAnnotation);
    // The name of the unit marker a backward's end writes (analysis/within_step.h).
    m.attr("BACKWARD_UNIT_MARKER") = std::string(kBackwardUnitMarker);
    // What the annotation around a module call begins with, before its instance path (analysis/peak.h).
    m.attr("MODULE_ANNOTATION_PREFIX") = std::string(kModuleAnnotationPrefix);
    // Retired recorders are kept to the end on purpose (a late allocator callback may reach one):
    // nanobind would list them as leaks at exit, in the user's output.
    nb::set_leak_warnings(false);
    bind_vocabulary(m);
    bind_commands(m);
    bind_analysis(m);
    bind_capture(m);
    bind_explain(m);
}
