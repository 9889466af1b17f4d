from collections.abc import Callable, Sequence
import enum


FIRST_FORWARD_ANNOTATION: str = 'vramscope.forward'

BACKWARD_ANNOTATION: str = 'vramscope.backward'

BACKWARD_UNIT_MARKER: str = 'backward'

MODULE_ANNOTATION_PREFIX: str = 'vramscope.module '

class EventKind(enum.Enum):
    alloc = 0

    free_requested = 1

    free_completed = 2

    segment_alloc = 3

    segment_free = 4

    segment_map = 5

    segment_unmap = 6

    oom = 7

    step = 8

    microbatch = 9

    annotation_start = 10

    annotation_end = 11

    snapshot = 12

    free = 13

class Verdict(enum.Enum):
    no_leak = 0

    leak = 1

    cannot_judge = 2

    @property
    def spelling(self) -> str: ...

class Shape(enum.Enum):
    level = 0

    rising = 1

    slowing = 2

    bounded = 3

    warm_up = 4

    too_short = 5

    @property
    def spelling(self) -> str: ...

    @property
    def is_leak(self) -> bool: ...

class NotLeakKind(enum.Enum):
    warm_up = 0

    bounded_cache = 1

    fragmentation = 2

    activation_peaks = 3

    cached_free = 4

    before_trace = 5

    @property
    def spelling(self) -> str: ...

class LeakEvidence(enum.Enum):
    survivors = 0

    replaced_bigger = 1

    pool_in_use = 2

    @property
    def spelling(self) -> str: ...

class LedgerPart(enum.Enum):
    leak = 0

    bounded_cache = 1

    warm_up = 2

    variation = 3

    before_trace = 4

    unexplained = 5

    @property
    def spelling(self) -> str: ...

class StepsSource(enum.Enum):
    markers = 0

    optimizer_annotations = 1

    optimizer_frames = 2

    inferred_period = 3

    none = 4

    @property
    def spelling(self) -> str: ...

class Memory(enum.Enum):
    torch = 0

    external = 1

    pinned = 2

    @property
    def spelling(self) -> str: ...

class UsageError(ValueError):
    pass

def commands() -> list:
    """
    The core's commands: [{name, inputs, summary, options: [{name, alias, value, help, required}]}].
    """

class CommandOptions:
    """What a command's options set, typed (cli/options.h)."""

    def __init__(self) -> None: ...

    @property
    def device_memory(self) -> int: ...

    @device_memory.setter
    def device_memory(self, arg: int, /) -> None: ...

    @property
    def warmup(self) -> int:
        """
        The steps the analysis leaves unjudged at the start: --warmup, or --steps' first; -1: the judge's default (what a run's capture reads NVML at the end of, and its live monitor skips).
        """

    @property
    def json(self) -> str: ...

    @json.setter
    def json(self, arg: str, /) -> None: ...

    @property
    def html(self) -> str: ...

    @html.setter
    def html(self, arg: str, /) -> None: ...

    @property
    def markdown(self) -> str: ...

    @markdown.setter
    def markdown(self, arg: str, /) -> None: ...

    @property
    def fail_on_leak(self) -> bool: ...

    @fail_on_leak.setter
    def fail_on_leak(self, arg: bool, /) -> None: ...

    @property
    def skip_empty(self) -> bool: ...

    @skip_empty.setter
    def skip_empty(self, arg: bool, /) -> None: ...

def parse_options(command: str, given: Sequence[tuple[str, str]]) -> CommandOptions:
    """
    Options as typed: [(option, text)] in the order given; UsageError naming the one that is wrong.
    """

def run_command(command: str, inputs: Sequence[str], options: CommandOptions) -> int:
    """Runs a core command (its output to stdout); returns its exit code."""

def size_with_unit(text: str, option: str, min: int = 1, max: int = 18446744073709551615) -> int:
    """
    A size with its unit (80GiB) in bytes; UsageError naming `option` otherwise.
    """

class Analysis:
    """Inputs judged together: their findings, owners joined (cli/cli.h)."""

    @property
    def files(self) -> list[str]: ...

    def terminal(self, color: bool = False) -> str: ...

    def json(self) -> str: ...

    def report(self) -> str: ...

    def exit_code(self, fail_on_leak: bool) -> int: ...

    def write_outputs(self, options: CommandOptions, color: bool = False) -> str:
        """
        Writes the report page and findings JSON the options name; returns the terminal's text.
        """

def analyze(files: Sequence[str], options: CommandOptions = ...) -> Analysis:
    """
    Traces or snapshots analysed, each joined to its owners (TRACE.owners.json).
    """

def findings_of(path: str, options: CommandOptions = ...) -> Analysis:
    """
    One input's findings: a findings JSON read back, else a trace or snapshot analysed, owners joined.
    """

def diff_texts(a: str, b: str, options: CommandOptions = ...) -> tuple[str, str]:
    """
    `vramscope diff A B` as (the terminal's text, its JSON), nothing written.
    """

def compare_table_texts(results: str) -> tuple[str, str]:
    """
    A compare run's table (OUT/compare.json) as (the terminal's text, its JSON), nothing written.
    """

def read_findings(text: str, name: str) -> Analysis:
    """A findings JSON read back, through the one reader."""

def attach_owners(findings_json: str, owners_json: str) -> str:
    """
    One run's findings JSON with each leak's owners joined (findings/json_reader.h attach_owners).
    """

def convert(source: str, destination: str, options: CommandOptions = ...) -> str:
    """Convert a torch snapshot to a .vscope trace; returns what it wrote."""

def terminal_safe(text: str, keep_newlines: bool = False) -> str:
    """
    Text from a file or the user, safe to print: control characters shown as escapes.
    """

def format_bytes(bytes: float) -> str:
    """Bytes as vramscope spells them: '36.0 MiB'."""

def unit_of_marker(marker: str) -> str:
    """What a unit marker's units are called: 'microbatch' for a backward's."""

class JudgeSettings:
    """
    Window, warm-up and minimum steps: one struct for the live monitor, the analysis of a trace and a capture's analysis at its end (analysis/settings.h).
    """

    def __init__(self) -> None: ...

    @property
    def window(self) -> int: ...

    @window.setter
    def window(self, arg: int, /) -> None: ...

    @property
    def warmup(self) -> int:
        """steps never judged at the start; -1: the judge's default"""

    @warmup.setter
    def warmup(self, arg: int, /) -> None: ...

    @property
    def min_steps(self) -> int: ...

    @min_steps.setter
    def min_steps(self, arg: int, /) -> None: ...

    def check(self) -> None:
        """Raises ValueError naming a setting out of range."""

    @staticmethod
    def warmup_for_judged(judged: int) -> int:
        """
        The default warm-up of a run made to judge this many steps after it (a test's check).
        """

def analyze_json(path: str, settings: JudgeSettings = ..., device_memory: int = 0) -> str:
    """Analyse a trace or torch snapshot; returns the findings JSON."""

def summary(path: str, device_memory: int = 0, color: bool = False, settings: JudgeSettings = ...) -> tuple[str, str]:
    """Analyse a trace; returns (terminal summary, findings JSON)."""

def frames(path: str) -> list:
    """
    Every distinct stack frame of a trace or snapshot: (file, line, function).
    """

class Recorder:
    """
    One live capture into a .vscope file (capture/recorder.h), judged as it goes by the live monitor it feeds (analysis/live_sink.h).
    """

    def __init__(self, path: str, settings: JudgeSettings = ...) -> None: ...

    def meta(self, arg0: str, arg1: str, /) -> None: ...

    def device(self, device: int, total_memory: int, allocated: int, reserved: int, budget: int = 0) -> None:
        """
        A device as it is (its capacity goes in the trace) and, with `budget`, the capacity the user gave (device_memory), which the live monitor projects the OOM step against instead.
        """

    def name_stream(self, arg0: int, arg1: str, /) -> None: ...

    def marker(self, arg0: EventKind, arg1: str, /) -> None: ...

    def end_step(self, unit: str = 'step', pools: Sequence[tuple[int, str, int, int]] = []) -> list:
        """
        Ends a step of this unit (its marker's name: 'optimizer step', 'eval batch', ...), queued: the worker thread drains it, with each library pool's reading at it (pools: (device, library as analysis/libraries.h spells it, bytes in use, the pool's bytes)). Returns what the live monitor confirmed or withdrew since the last call, at the step ends drained so far: [{line, site, device, shape, evidence, bytes_per_step, since_step, projected_oom_step, blocks}].
        """

    def said(self) -> list:
        """
        What the live monitor confirmed or withdrew since the last call, every step end so far drained first (same dicts as end_step).
        """

    def leaking(self) -> list:
        """
        The live monitor's last word: the sites it holds as leaking now (same dicts as end_step).
        """

    def rising_in_step(self, unit_marker: str) -> list:
        """
        The sites whose bytes rose across the units of the run in hand as a leak does (same dicts as end_step; bytes_per_step is per unit, projected_oom_step the unit count at which the device runs out): asked at the highest point, its last unit's end. unit_marker names the units.
        """

    def set_python_stacks(self, arg: bool, /) -> None: ...

    def event(self, kind: EventKind, device: int, addr: int, size: int) -> None:
        """
        An event from a source other than the allocator hook (the live tensors of a CPU run), stacked from the calling thread's Python frames as the hook's are.
        """

    def start_driver_capture(self, cupti_dirs: Sequence[str]) -> str:
        """
        Records memory taken from the CUDA driver outside torch's allocator, and pinned host memory, through CUPTI (capture/driver_calls.h), looked for in `cupti_dirs` first. '' when on, else why not.
        """

    def stop_driver_capture(self) -> None:
        """
        Lets go of CUPTI (a profiler may take it then); nothing if it feeds another capture.
        """

    def watch_device(self, device: int, pci_bus_id: str) -> str:
        """
        NVML's figure for this process on a CUDA device (found by PCI bus id, 'dddddddd:bb:dd.f'), written now, before each step marker and at the end. '' when watched, else why not.
        """

    @property
    def nvml_state(self) -> str:
        """
        For the meta 'capture.nvml': 'on', 'on (device total: one process)' or 'off: why'.
        """

    @property
    def projected_oom_step(self) -> int | None:
        """
        The step at which a device runs out at the recent rates of the leaks held now; None without a leak or a capacity.
        """

    def flush(self) -> None: ...

    def close(self) -> None: ...

    def abandon(self) -> None: ...

    def fault(self) -> str: ...

    @property
    def allocations(self) -> int: ...

    @property
    def steps(self) -> int:
        """Steps ended so far."""

    @property
    def path(self) -> str: ...

    def activate(self) -> None:
        """Make this the recorder the allocator hook feeds."""

    def deactivate(self) -> None: ...

def allocator_sink() -> int:
    """Address of the C function the allocator hook calls."""

def feed_allocator_event(kind: EventKind, device: int, addr: int, size: int, stream: int = 0, node: str = '') -> None: ...

def python_frames_self_check() -> str:
    """
    Compare the GIL-free frame walk with the interpreter's; empty when they agree.
    """

def python_frames_supported() -> bool: ...

def frame_locals(frame: object) -> dict:
    """
    A frame's locals as a new dict, leaving nothing on the frame (before Python 3.13, f_locals is a
    snapshot the frame keeps, with every object a local held when it was read).
    """

def reference_walk(arg0: list, arg1: object, arg2: tuple, arg3: Callable, arg4: object, arg5: int, arg6: float, /) -> object:
    """
    Breadth-first search of the object graph (owners/reference_walk.h): [(root label, [objects])].
    """
