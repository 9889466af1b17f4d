// One live capture: allocator events in, a .vscope file and the sinks' events out (events/sink.h:
// the live monitor is one). It records; it judges nothing.
//
// The allocator hook calls allocator_event() under the caching allocator's lock, on whatever
// thread allocated, without the GIL: so it never takes the GIL, never throws, and does only what
// cannot wait — read the clock, walk the thread's frames while they exist, find the stack in the
// thread's own cache — then hands the event to the thread's own queue (capture/chunk_queue.h),
// numbered in its device's order. The caller serialises the calls for one device (torch's
// allocator lock does), so that number is a plain increment: the path has no atomic
// read-modify-write and no lock, and the shared stack table is locked only for a stack the thread
// has not met. A free request waits in its device's lane for the device's next call, which is
// nearly always its completion: the two are queued as one `free`.
//
// A step end or marker is queued too, by the thread that ends the step, numbered in a lane of its
// own with every other lane's next number as its cut: what was numbered before it comes before it
// in the file, whichever thread's queue it sits in. So the training thread pays a few pushes at a
// step end, not the drain, and the live monitor's word on a step reaches it at the next one (the
// worker has drained it by then, or that step end drains).
//
// A worker thread drains the queues every 2 ms, each lane in number order, lanes merged by time
// within the markers' cuts (a stack met since the last drain reaches the sinks before the events
// that name it), and hands the file its chunk every half second, so SIGKILL loses at most that.
// Any internal fault stops the capture (the run goes on) and is reported once through fault().
//
// Memory outside torch's allocator comes from the driver's memory calls (driver_calls.h) through
// driver_event(), rare, off the hook's path, from any thread: one locked buffer of its own, numbered
// in an order of its own per device, merged with the allocator's by time. NVML's figure for the
// process (device_usage.h) is queued before a step marker when a read is due (at most once per
// 20 ms a device, and a thousandth of the run's time), when a device is first watched, and written
// at close. A library pool's figures (PoolReading: what the capture read from JAX, CuPy) come with
// the step end they were read at, queued after NVML's and before the marker.
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "capture/chunk_queue.h"
#include "capture/clock.h"
#include "capture/device_usage.h"
#include "capture/python_frames.h"
#include "capture/spin_lock.h"
#include "capture/thread_table.h"
#include "events/event.h"
#include "events/sink.h"
#include "trace/writer.h"

namespace vramscope::capture {

// A library's own pool on one device, as the library counts it (python/vramscope/capture/pools.py).
struct PoolReading {
    uint8_t device = 0;
    std::string library;  // as analysis/libraries.h spells it: "JAX/XLA", "CuPy"
    uint64_t in_use = 0;  // bytes its live arrays hold
    uint64_t pool = 0;    // bytes it took from the driver
};

class Recorder {
public:
    static constexpr int kDrainMilliseconds = 2;
    static constexpr int kFlushMilliseconds = 500;

    explicit Recorder(const std::string& path);  // throws std::runtime_error naming the path
    ~Recorder();
    Recorder(const Recorder&) = delete;
    Recorder& operator=(const Recorder&) = delete;

    // Before the capture starts: the sink then sees every event from the first on. Not owned.
    void add_sink(EventSink* sink);
    void meta(std::string_view key, std::string_view value);
    void device(uint8_t device, uint64_t total_memory, uint64_t allocated, uint64_t reserved);
    void name_stream(uint64_t handle, std::string_view label);
    // Off when the frame reader failed its self-check: events still come, without Python stacks.
    void set_python_stacks(bool on) { python_stacks_.store(on, std::memory_order_relaxed); }

    // From the allocator hook. autograd_node: the backward node the engine is running, or null.
    // Calls for one device never overlap (torch's allocator holds its lock around them).
    // Hot: with the walk and the hook's entry point, in one run of code (.text.hot), so that the
    // lines an event runs through are few and together.
    [[gnu::hot]] void allocator_event(EventKind kind, uint8_t device, uint64_t addr, uint64_t size, uint64_t stream,
                                      const char* autograd_node) noexcept;
    // From the driver's memory calls (driver_calls.h): an allocation is stacked with the calling
    // thread's Python frames under one frame for the library that called the driver (file: its
    // path, line 0, function: the driver call); a free carries no stack. Takes the stacks' lock.
    void driver_event(EventKind kind, uint8_t device, uint64_t addr, uint64_t size, std::string_view library,
                      std::string_view call) noexcept;

    // NVML's figure for this process on `device` (a CUDA ordinal, found by its PCI bus id) from now
    // on; one is written at once. "" when watched, else why not.
    std::string watch_device(uint8_t device, std::string_view pci_bus_id);
    // Where the figures come from: NVML, unless this gives another (a test's) before any watch.
    void use_device_usage(std::unique_ptr<DeviceUsage> usage);
    // The trace's meta "capture.nvml" (device_usage.h).
    std::string usage_state() const;

    // Queues a marker (microbatch, annotation) after every event numbered before it.
    void marker(EventKind kind, std::string_view name);
    // Queues NVML's figures and the pools' readings, then the step marker, named by the step's unit
    // ("optimizer step", "eval batch", ...: what Steps::unit reads back), after every event
    // numbered before it.
    void end_step(std::string_view unit, const std::vector<PoolReading>& pools = {});
    // NVML read at each step end from `first` through `last`, due or not (a handful of reads a
    // run): the analysis takes what the CUDA context holds from the reading at the end of warm-up,
    // and one read earlier would count the modules warm-up loads after it as growth nobody
    // recorded. Counted from 0 as the analysis counts them: from the first step end that a memory
    // event precedes (it forgets the ones before, Replay::forget_steps_before_memory). Before the
    // first step end.
    void read_usage_at_step_ends(uint64_t first, uint64_t last) {
        usage_from_step_.store(first, std::memory_order_relaxed);
        usage_through_step_.store(last, std::memory_order_relaxed);
    }
    uint64_t steps() const { return steps_.load(std::memory_order_relaxed); }  // ended so far
    // Every event recorded so far, markers included, into the file and the sinks.
    void drain();

    void flush();
    // Closes the file; a process that never allocated (through torch or the driver) leaves none
    // (compile workers, helpers).
    void close();
    // After fork(), in the child: let go of the file without writing to it (it is the parent's).
    void abandon() noexcept;

    std::string fault() const;
    uint64_t allocations();  // through torch's allocator, every one recorded so far
    const std::string& path() const { return path_; }

private:
    struct CachedStack {
        std::vector<RawFrame> frames;
        const char* node;
        uint32_t stack;
    };
    struct RawFrameHash {
        size_t operator()(const RawFrame& f) const {
            return std::hash<uint64_t>{}(uint64_t(reinterpret_cast<uintptr_t>(f.code)) * 31 + uint64_t(f.offset));
        }
    };
    struct CodeText {
        std::string file, function;
    };
    // A stack interned since the last drain, for the sinks.
    struct NewStack {
        uint32_t stack;
        std::vector<SinkFrame> frames;
    };

    struct Queued {
        Event event;
        uint64_t seq;  // in its lane's order (lane())
    };
    // Allocator events are numbered per device, the driver's per device apart from them (their
    // calls are not under the allocator's lock), markers and NVML's figures in a lane of their own:
    // a drain orders each lane by number, then merges the lanes by time within the markers' cuts.
    static constexpr size_t kMarkerLane = 512;
    static constexpr size_t kLanes = kMarkerLane + 1;
    static constexpr bool is_mark(EventKind k) {
        return k == EventKind::step || k == EventKind::microbatch || k == EventKind::annotation_start ||
               k == EventKind::annotation_end || k == EventKind::device_usage || k == EventKind::pool_usage;
    }
    static size_t lane(const Event& e) {
        return is_mark(e.kind) ? kMarkerLane : size_t(e.device) + (is_external_event(e.kind) ? 256 : 0);
    }
    // Marker-lane events numbered up to `last` (from the previous group's on), and where they go:
    // after each listed lane's events numbered below its cut, before the rest; a lane not listed
    // had numbered none, so all of its events come after.
    struct Cut {
        uint32_t lane;
        uint64_t seq;
    };
    struct MarkGroup {
        uint64_t last;
        std::vector<Cut> cuts;
        uint64_t cut(size_t lane) const {
            for (const Cut& c : cuts)
                if (c.lane == lane) return c.seq;
            return 0;
        }
    };
    using EventQueue = ChunkQueue<Queued>;
    // A stack as one hook thread met it last in its slot of the thread's direct-mapped cache: the
    // usual allocation finds its stack in one line, without a lock, a division or a copy of its
    // frames, by its key (capture/stack_hash.h) and node.
    struct ThreadStack {
        uint64_t hash = 0, check = 0;
        const char* node = nullptr;
        uint32_t frames = 0;
        uint32_t stack = 0;  // 0: an empty slot (a stack with frames is never 0)
    };
    static constexpr size_t kThreadStacks = 256;
    // All a hook thread keeps for this recorder (threads_ holds it): what every event reads in its
    // first line.
    struct alignas(64) HookThread {
        EventQueue::Writer events;  // into a queue the recorder owns
        size_t known_streams = 0;
        std::pair<uint64_t, uint16_t> streams[8];
        FrameTrail trail;
        ThreadStack stacks[kThreadStacks];
        RawFrame frames[kWalkDepth];  // a walk's copy, for a stack the cache did not hold
    };
    // The calling thread's, set up on its first event (join_thread, kept off the hot path); null
    // when out of memory. The hook's rare paths are kept out of line and apart (cold), so that the
    // lines of code an event runs through are few: between two events a step runs enough of torch
    // to push them out.
    HookThread* this_thread() noexcept;
    [[gnu::cold]] HookThread* join_thread(uintptr_t me) noexcept;
    [[gnu::cold]] bool learn_stream(HookThread& t, uint64_t handle, uint16_t& index);
    // A stack the thread's cache did not hold: walked again for its frames (the same: the thread
    // is still inside the allocator), found or added in the shared table, kept in `slot`.
    [[gnu::cold]] bool learn_stack(HookThread& t, ThreadStack& slot, const StackKey& key, const char* node);
    uint32_t stack_of(uint64_t hash, const RawFrame* frames, size_t n, const char* node);
    uint32_t intern(const RawFrame* frames, size_t n, const char* node);
    // A driver allocation's stack: the library's frame, then the Python frames.
    uint32_t intern_driver_stack(const RawFrame* frames, size_t n, std::string_view library, std::string_view call);
    SinkFrame frame_of(const RawFrame& f);
    uint16_t stream_index(uint64_t handle);
    // Numbered in the marker lane as one group, cut after what every other lane numbered so far,
    // and queued on the calling thread's queue. Whether any memory event was numbered before it.
    bool enqueue_marks(const std::vector<Event>& marks);
    // Each lane that numbered an event so far, with its next number: what a marker queued now follows.
    std::vector<Cut> cuts_now();
    Event mark(EventKind kind, std::string_view name);  // stamped now, its name interned
    Event pool_event(const PoolReading& r);               // stamped now, its library named to the sinks once
    // NVML's figures now (asked outside the drain's lock: a read may take a millisecond), as events.
    std::vector<DeviceUsage::Reading> read_usage(bool every);
    std::vector<Event> usage_events(const std::vector<DeviceUsage::Reading>& readings);
    // Everything when `all` (no hook is inside any more), else up to the first gap per lane and
    // the first marker still waiting for an event numbered before it.
    void drain_locked(bool all = false);
    // The first group with marks numbered `from` on (groups recorded whole are let go); null: none.
    const MarkGroup* group_from(uint64_t from);
    bool cuts_met(const MarkGroup& g, const std::array<uint64_t, kLanes>& next) const;
    bool in_order(const std::vector<Queued>& events);
    void merge_in_order(bool all);
    void record(const Queued& q);  // into the file, and the batch the sinks get at the drain's end
    void hand_to_sinks();
    [[gnu::cold]] void fail(const std::string& why) noexcept;
    void worker();

    // What every event reads, together.
    std::atomic<bool> stopped_{false};
    std::atomic<bool> python_stacks_{true};
    EventClock clock_;

    std::string path_;
    std::unique_ptr<TraceWriter> writer_;  // thread-safe itself

    ThreadTable<HookThread> threads_;
    mutable std::mutex queues_mutex_;  // taken once per thread, to register its queue
    std::vector<std::unique_ptr<EventQueue>> queues_;
    struct DriverBuffer {
        SpinLock lock;  // driver_event() from any thread, the drain
        std::vector<Queued> events;
    } driver_;
    // Each device's allocator lane, alone in its line (devices' hooks run at once on different
    // threads), touched only by the device's hook calls, which torch serialises: the next number,
    // and the free request just made. torch completes a free in the same call unless the block
    // waits on other streams, so the next call usually completes it: then the two go as one
    // `free` (one event queued, not two, the request's time); any other call sends it on first.
    // The request is numbered when it is sent on, so a step end's cut (`next`, read on another
    // thread) never counts one that waits: counted, it would hold the marker until the device's
    // next call, and every lane behind the marker with it.
    struct alignas(64) DeviceLane {
        std::atomic<uint64_t> next{0};  // relaxed: a step end on another thread reads it as its cut
        uint64_t pending_stream = 0;  // the request's stream handle
        Queued pending{};
        std::atomic<bool> has_pending{false};  // release/acquire: close() reads it from its thread
        uint64_t number() {  // one writer at a time: torch's lock, or close() once no hook is inside
            const uint64_t n = next.load(std::memory_order_relaxed);
            next.store(n + 1, std::memory_order_relaxed);
            return n;
        }
    };
    static_assert(sizeof(DeviceLane) == 64);
    std::array<DeviceLane, 256> device_lanes_;
    std::array<uint64_t, 256> driver_seq_{};  // the driver's lanes' next numbers, under driver_.lock
    std::atomic<uint64_t> allocations_{0}, external_allocations_{0};  // recorded, counted by the drain

    mutable std::mutex mutex_;  // the drain, the sinks
    std::vector<EventSink*> sinks_;
    std::vector<Event> batch_;                 // this drain's events, in order, for the sinks
    std::vector<std::vector<Queued>> taken_;   // each queue's events, then the driver's, as the drain took them
    std::vector<Queued> draining_, held_back_;  // held back: behind an event or a marker still on its way
    std::array<uint64_t, kLanes> next_seq_{};  // the next number each lane's drain expects

    std::mutex marks_mutex_;  // numbering the marker lane; its groups (the drain reads them)
    uint64_t next_mark_ = 0;
    std::deque<MarkGroup> mark_groups_;  // not yet recorded whole, in number order
    std::atomic<uint64_t> steps_{0}, steps_recorded_{0};  // ended; drained
    std::atomic<uint64_t> steps_after_memory_{0};         // ended with a memory event numbered before

    mutable std::mutex intern_mutex_;  // the hook's caches, below
    std::unordered_map<uint64_t, uint32_t> stack_by_hash_;  // -> index in stacks_
    std::vector<CachedStack> stacks_;
    std::unordered_map<RawFrame, SinkFrame, RawFrameHash> frame_ids_;  // its views: code_text_'s strings
    std::unordered_map<const void*, CodeText> code_text_;
    std::unordered_map<const char*, SinkFrame> node_frames_;
    std::vector<NewStack> new_stacks_;                    // interned since the last drain
    std::unordered_map<std::string, uint32_t> pool_names_;  // a pool's library -> its string id
    std::vector<std::pair<uint32_t, std::string>> new_names_;  // met since the last drain, for the sinks
    struct LibraryFrame {
        std::string file, function;  // the views of `frame`
        SinkFrame frame;
    };
    std::unordered_map<std::string, LibraryFrame> library_frames_;  // by library, '\0', call
    std::unordered_set<uint32_t> driver_stacks_;                     // handed to the sinks already
    std::vector<std::pair<uint64_t, uint16_t>> streams_;
    mutable std::mutex fault_mutex_;
    std::string fault_;

    mutable std::mutex usage_mutex_;
    std::unique_ptr<DeviceUsage> usage_;
    std::atomic<uint64_t> usage_from_step_{1}, usage_through_step_{0};  // none unless asked
    std::string usage_off_;  // why NVML could not be opened

    std::mutex worker_mutex_;
    std::condition_variable worker_wake_;
    bool closing_ = false;
    std::unique_ptr<std::thread> worker_;
};

}  // namespace vramscope::capture
