#include "capture/recorder.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "common/format.h"

namespace vramscope::capture {
namespace {

constexpr const char* kAutogradFile = "<autograd engine>";

}  // namespace

Recorder::Recorder(const std::string& path)
    : path_(path), writer_(std::make_unique<TraceWriter>(path)) {
    worker_ = std::make_unique<std::thread>([this] { worker(); });
}

Recorder::~Recorder() {
    try {
        close();
    } catch (...) {
    }
}

void Recorder::worker() {
#ifdef __linux__
    pthread_setname_np(pthread_self(), "vramscope");  // what top, py-spy and perf show for it
#endif
    auto next_flush = std::chrono::steady_clock::now();
    std::unique_lock lock(worker_mutex_);
    while (!closing_) {
        worker_wake_.wait_for(lock, std::chrono::milliseconds(kDrainMilliseconds));
        if (closing_) break;
        const auto now = std::chrono::steady_clock::now();
        if (now >= next_flush) {
            next_flush = now + std::chrono::milliseconds(kFlushMilliseconds);
            clock_.recalibrate();
            flush();
        } else if (!stopped_.load(std::memory_order_relaxed)) {
            try {
                std::lock_guard drain(mutex_);
                drain_locked();
            } catch (const std::exception& ex) {
                fail(std::string("capture stopped: ") + ex.what());
            }
        }
    }
}

void Recorder::fail(const std::string& why) noexcept {
    if (stopped_.exchange(true)) return;
    try {
        std::lock_guard lock(fault_mutex_);
        fault_ = why;
    } catch (...) {
    }
}

void Recorder::add_sink(EventSink* sink) {
    std::lock_guard lock(mutex_);
    sinks_.push_back(sink);
}

void Recorder::meta(std::string_view key, std::string_view value) {
    if (writer_) writer_->meta(key, value);
}

void Recorder::device(uint8_t device, uint64_t total_memory, uint64_t allocated, uint64_t reserved) {
    if (!writer_) return;
    writer_->device(DeviceInfo{device, total_memory, allocated, reserved});
    std::lock_guard lock(mutex_);
    for (EventSink* sink : sinks_) sink->device(device, total_memory, allocated);
}

void Recorder::name_stream(uint64_t handle, std::string_view label) {
    meta("stream." + std::to_string(handle), label);
}

uint16_t Recorder::stream_index(uint64_t handle) {
    for (const auto& [h, index] : streams_)
        if (h == handle) return index;
    streams_.emplace_back(handle, writer_->intern_stream(handle));
    return streams_.back().second;
}

SinkFrame Recorder::frame_of(const RawFrame& f) {
    auto [it, inserted] = frame_ids_.try_emplace(f);
    if (inserted) {
        auto code = code_text_.find(f.code);
        if (code == code_text_.end()) {
            CodeInfo info = describe_code(f.code);
            code = code_text_.emplace(f.code, CodeText{std::move(info.file), std::move(info.function)}).first;
        }
        const uint32_t line = line_of(f.code, int32_t(f.offset));
        const std::string& file = code->second.file;
        const std::string& function = code->second.function;
        it->second = SinkFrame{writer_->intern_frame(file, line, function), file, function, line};
    }
    return it->second;
}

// A stack seen for the first time: its frames into the writer's tables, innermost first; the
// autograd node, when there is one, is the outermost frame (the engine called it). The sinks
// get it at the next drain, before the events that name it.
uint32_t Recorder::intern(const RawFrame* frames, size_t n, const char* node) {
    NewStack added{0, {}};
    added.frames.reserve(n + 1);
    for (size_t i = 0; i < n; ++i) added.frames.push_back(frame_of(frames[i]));
    if (node) {
        auto [it, inserted] = node_frames_.try_emplace(node);
        if (inserted) it->second = SinkFrame{writer_->intern_frame(kAutogradFile, 0, node), kAutogradFile, node, 0};
        added.frames.push_back(it->second);
    }
    std::vector<uint32_t> ids;
    ids.reserve(added.frames.size());
    for (const SinkFrame& f : added.frames) ids.push_back(f.id);
    added.stack = writer_->intern_stack(ids.data(), ids.size());
    new_stacks_.push_back(std::move(added));
    return new_stacks_.back().stack;
}

uint32_t Recorder::stack_of(uint64_t h, const RawFrame* frames, size_t n, const char* node) {
    for (;; h = h * 0x9E3779B97F4A7C15ull + 1) {  // probe on the (rare) hash collision
        auto [it, inserted] = stack_by_hash_.try_emplace(h, uint32_t(stacks_.size()));
        if (inserted) {
            stacks_.push_back(CachedStack{std::vector<RawFrame>(frames, frames + n), node, intern(frames, n, node)});
            return stacks_.back().stack;
        }
        const CachedStack& c = stacks_[it->second];
        if (c.node == node && c.frames.size() == n && same_frames(frames, c.frames.data(), n)) return c.stack;
    }
}

uint32_t Recorder::intern_driver_stack(const RawFrame* frames, size_t n, std::string_view library,
                                       std::string_view call) {
    std::string key(library);
    key.push_back('\0');
    key.append(call);
    auto [lib, inserted] = library_frames_.try_emplace(std::move(key));
    if (inserted) {
        LibraryFrame& f = lib->second;
        f.file = library, f.function = call;
        f.frame = SinkFrame{writer_->intern_frame(f.file, 0, f.function), f.file, f.function, 0};
    }
    NewStack added{0, {lib->second.frame}};
    for (size_t i = 0; i < n; ++i) added.frames.push_back(frame_of(frames[i]));
    std::vector<uint32_t> ids;
    for (const SinkFrame& f : added.frames) ids.push_back(f.id);
    added.stack = writer_->intern_stack(ids.data(), ids.size());
    const uint32_t stack = added.stack;
    if (driver_stacks_.insert(stack).second) new_stacks_.push_back(std::move(added));
    return stack;
}

void Recorder::driver_event(EventKind kind, uint8_t device, uint64_t addr, uint64_t size, std::string_view library,
                            std::string_view call) noexcept {
    if (stopped_.load(std::memory_order_relaxed)) return;
    try {
        Queued q{Event{}, 0};
        Event& e = q.event;
        e.kind = kind;
        e.device = device;
        e.addr = addr;
        e.size = size;
        e.time_us = clock_.now_us();
        if (has_stack(kind)) {
            std::vector<RawFrame> frames(python_stacks_.load(std::memory_order_relaxed) ? kWalkDepth : 0);
            const size_t n = frames.empty() ? 0 : walk_python_frames(frames.data());
            std::lock_guard lock(intern_mutex_);
            if (!writer_) return;  // closed while this event was on its way
            e.stack = intern_driver_stack(frames.data(), n, library, call);
        }
        std::lock_guard lock(driver_.lock);
        uint64_t& next = driver_seq_[device];
        q.seq = next;
        driver_.events.push_back(q);
        ++next;  // numbered once nothing can fail
    } catch (const std::exception& ex) {
        fail(std::string("capture stopped: ") + ex.what());
    } catch (...) {
        fail("capture stopped: unknown internal error");
    }
}

void Recorder::use_device_usage(std::unique_ptr<DeviceUsage> usage) {
    std::lock_guard lock(usage_mutex_);
    usage_ = std::move(usage);
}

std::string Recorder::watch_device(uint8_t device, std::string_view pci_bus_id) {
    std::vector<DeviceUsage::Reading> first;
    {
        std::lock_guard lock(usage_mutex_);
        if (!usage_ && !(usage_ = DeviceUsage::open(usage_off_))) return usage_off_;
        if (std::string why = usage_->watch(device, pci_bus_id); !why.empty()) return why;
        for (const auto& r : usage_->read(DeviceUsage::Clock::now(), true))
            if (r.device == device) first.push_back(r);
    }
    if (!stopped_.load(std::memory_order_relaxed)) enqueue_marks(usage_events(first));
    return "";
}

std::string Recorder::usage_state() const {
    std::lock_guard lock(usage_mutex_);
    return usage_ ? usage_->state() : "off: " + (usage_off_.empty() ? std::string("no device watched") : usage_off_);
}

std::vector<DeviceUsage::Reading> Recorder::read_usage(bool every) {
    std::lock_guard lock(usage_mutex_);
    return usage_ ? usage_->read(DeviceUsage::Clock::now(), every) : std::vector<DeviceUsage::Reading>{};
}

// NVML's figures as events, stamped now.
std::vector<Event> Recorder::usage_events(const std::vector<DeviceUsage::Reading>& readings) {
    std::vector<Event> events;
    for (const DeviceUsage::Reading& r : readings) {
        Event e;
        e.kind = EventKind::device_usage;
        e.device = r.device;
        e.size = r.bytes;
        e.time_us = clock_.now_us();
        events.push_back(e);
    }
    return events;
}

Recorder::HookThread* Recorder::join_thread(uintptr_t me) noexcept {
    try {
        return threads_.join(me, [this] {
            auto t = std::make_unique<HookThread>();
            std::lock_guard lock(queues_mutex_);
            queues_.push_back(std::make_unique<EventQueue>());
            t->events = EventQueue::Writer(*queues_.back());
            return t;
        });
    } catch (...) {
        return nullptr;
    }
}

inline Recorder::HookThread* Recorder::this_thread() noexcept {
    const uintptr_t me = thread_pointer();
    HookThread* t = threads_.find(me);
    return t ? t : join_thread(me);
}

bool Recorder::learn_stream(HookThread& t, uint64_t handle, uint16_t& index) {
    std::lock_guard lock(intern_mutex_);
    if (!writer_) return false;  // closed while this event was on its way
    index = stream_index(handle);
    if (t.known_streams < 8) t.streams[t.known_streams++] = {handle, index};
    return true;
}

bool Recorder::learn_stack(HookThread& t, ThreadStack& slot, const StackKey& key, const char* node) {
    const size_t n = walk_python_frames(t.frames);  // the frames just hashed, now copied
    std::lock_guard lock(intern_mutex_);
    if (!writer_) return false;
    slot = ThreadStack{key.hash, key.check, node, key.frames, stack_of(key.hash, t.frames, n, node)};
    return true;
}

uint64_t Recorder::allocations() {
    drain();
    return allocations_.load(std::memory_order_relaxed);
}

void Recorder::allocator_event(EventKind kind, uint8_t device, uint64_t addr, uint64_t size, uint64_t stream,
                               const char* node) noexcept {
    if (stopped_.load(std::memory_order_relaxed)) return;
    try {
        HookThread* t = this_thread();
        if (!t) [[unlikely]] return fail("capture stopped: out of memory");
        DeviceLane& lane = device_lanes_[device];
        if (lane.has_pending.load(std::memory_order_relaxed)) {
            lane.has_pending.store(false, std::memory_order_relaxed);
            Queued request = lane.pending;
            request.seq = lane.number();
            // Else the block waits on other streams: its completion comes later.
            const bool completed = kind == EventKind::free_completed && addr == request.event.addr &&
                                   size == request.event.size && stream == lane.pending_stream;
            if (completed) request.event.kind = EventKind::free;
            t->events.push(request);
            if (completed) return;
        }
        Queued q{Event{}, 0};
        Event& e = q.event;
        e.kind = kind;
        e.device = device;
        e.addr = addr;
        e.size = size;
        e.time_us = clock_.now_us();
        // Each thread keeps the streams and stacks it met, so that only a new one takes the
        // shared tables' lock.
        size_t i = 0;
        while (i < t->known_streams && t->streams[i].first != stream) ++i;
        if (i < t->known_streams) e.stream = t->streams[i].second;
        else if (!learn_stream(*t, stream, e.stream)) [[unlikely]] return;
        if (has_stack(kind)) {
            const StackHasher walk =
                python_stacks_.load(std::memory_order_relaxed) ? hash_python_frames(t->trail) : StackHasher{};
            if (walk.frames() || node) {
                const StackKey key = walk.key(node);
                ThreadStack& slot = t->stacks[key.hash >> 56];
                static_assert(kThreadStacks == 256);
                if (!(slot.stack && slot.hash == key.hash && slot.check == key.check && slot.node == node &&
                      slot.frames == key.frames)) [[unlikely]] {
                    if (!learn_stack(*t, slot, key, node)) return;
                }
                e.stack = slot.stack;
            }
        }
        if (kind == EventKind::free_requested) {
            lane.pending = q;
            lane.pending_stream = stream;
            return lane.has_pending.store(true, std::memory_order_release);
        }
        // Numbered, then queued: a number taken by an event that never arrives (bad_alloc, which
        // stops the capture) holds its device back only until close() drains everything.
        q.seq = lane.number();
        t->events.push(q);
        if (kind == EventKind::oom) flush();  // on disk before the exception reaches anyone
    } catch (const std::exception& ex) {
        fail(std::string("capture stopped: ") + ex.what());
    } catch (...) {
        fail("capture stopped: unknown internal error");
    }
}

// The threads' events into the file and the sinks: each lane in the order it was numbered in,
// lanes interleaved by time, a marker after exactly what its cuts say came before it. An event
// numbered but not yet in its thread's queue holds back the later ones of its lane, and a marker
// waiting for it, until the next drain.
void Recorder::drain_locked(bool all) {
    if (!writer_) return;  // closed while the caller waited for the lock
    {
        // Each queue's events as far as published, then the driver's, into vectors that keep their
        // capacity from drain to drain.
        std::lock_guard lock(queues_mutex_);
        taken_.resize(queues_.size() + 1);
        for (size_t k = 0; k < queues_.size(); ++k) queues_[k]->take(taken_[k]);
        std::lock_guard driver(driver_.lock);
        std::swap(driver_.events, taken_.back());
    }
    if (all) {  // the free requests still waiting for their devices' next call
        for (DeviceLane& d : device_lanes_)
            if (d.has_pending.exchange(false, std::memory_order_acquire)) {
                Queued request = d.pending;
                request.seq = d.number();
                taken_.back().push_back(request);
            }
    }
    // The usual case, one thread allocating and ending steps: its events are in order already.
    const std::vector<Queued>* only = nullptr;
    size_t nonempty = 0;
    for (const auto& t : taken_)
        if (!t.empty()) ++nonempty, only = &t;
    if (nonempty == 1 && held_back_.empty() && (all || in_order(*only))) {
        for (const Queued& q : *only) record(q);
    } else if (nonempty > 0 || !held_back_.empty()) {
        merge_in_order(all);
    }
    for (auto& t : taken_) t.clear();
    hand_to_sinks();
}

const Recorder::MarkGroup* Recorder::group_from(uint64_t from) {
    std::lock_guard lock(marks_mutex_);
    while (!mark_groups_.empty() && mark_groups_.front().last < next_seq_[kMarkerLane]) mark_groups_.pop_front();
    for (const MarkGroup& g : mark_groups_)  // stays put: a deque grows without moving, and only this pops
        if (g.last >= from) return &g;
    return nullptr;
}

bool Recorder::cuts_met(const MarkGroup& g, const std::array<uint64_t, kLanes>& next) const {
    for (const Cut& c : g.cuts)
        if (next[c.lane] < c.seq) return false;
    return true;
}

// Whether one queue's events may be recorded as they stand: every lane's numbering goes on with
// no gap, no event comes before a marker it follows, and no marker before what it follows.
bool Recorder::in_order(const std::vector<Queued>& events) {
    std::array<uint64_t, kLanes> next = next_seq_;
    const MarkGroup* g = group_from(next[kMarkerLane]);
    for (const Queued& q : events) {
        const size_t l = lane(q.event);
        if (q.seq != next[l]++) return false;
        if (l != kMarkerLane) {
            if (g && q.seq >= g->cut(l)) return false;  // its marker is still on its way
            continue;
        }
        if (!g || !cuts_met(*g, next)) return false;
        if (q.seq == g->last) g = group_from(q.seq + 1);
    }
    return true;
}

// Several threads, the driver's events, or a gap: every lane's events sorted by number, up to its
// first gap, then merged by time, an event never before a marker whose cut it is at or past, a
// marker never before an event its cut names. A number met twice (a caller that broke the
// one-call-at-a-time rule) passes rather than hold its lane back for the rest of the run.
void Recorder::merge_in_order(bool all) {
    draining_.swap(held_back_);
    held_back_.clear();
    for (const auto& t : taken_) draining_.insert(draining_.end(), t.begin(), t.end());
    std::sort(draining_.begin(), draining_.end(), [](const Queued& a, const Queued& b) {
        return lane(a.event) != lane(b.event) ? lane(a.event) < lane(b.event) : a.seq < b.seq;
    });
    struct Run {
        size_t at, end, lane;
    };
    std::vector<Run> runs;
    size_t marks = SIZE_MAX;  // the marker lane's run
    std::array<uint64_t, kLanes> expect = next_seq_;
    for (size_t k = 0; k < draining_.size();) {
        const size_t l = lane(draining_[k].event);
        size_t end = k;
        for (; end < draining_.size() && lane(draining_[end].event) == l && (all || draining_[end].seq <= expect[l]); ++end)
            expect[l] = std::max(expect[l], draining_[end].seq + 1);
        if (l == kMarkerLane) marks = runs.size();
        runs.push_back(Run{k, end, l});
        k = end;
        while (k < draining_.size() && lane(draining_[k].event) == l) held_back_.push_back(draining_[k++]);
    }
    const MarkGroup* g = group_from(next_seq_[kMarkerLane]);
    while (true) {
        const Queued* mark = marks < runs.size() && runs[marks].at < runs[marks].end ? &draining_[runs[marks].at] : nullptr;
        size_t best = SIZE_MAX, blocked = SIZE_MAX;  // the earliest head free to go; the earliest held by a marker
        for (size_t r = 0; r < runs.size(); ++r) {
            if (r == marks || runs[r].at == runs[r].end) continue;
            const Queued& q = draining_[runs[r].at];
            size_t& pick = g && q.seq >= g->cut(runs[r].lane) ? blocked : best;
            if (pick == SIZE_MAX || q.event.time_us < draining_[runs[pick].at].event.time_us) pick = r;
        }
        size_t take = best;
        if (mark && (!g || cuts_met(*g, next_seq_))) take = marks;  // nothing that precedes it is left
        else if (take == SIZE_MAX && all) take = mark ? marks : blocked;  // at close: what never came, never will
        if (take == SIZE_MAX) break;
        const Queued& q = draining_[runs[take].at++];
        record(q);
        if (take == marks && g && q.seq >= g->last) g = group_from(q.seq + 1);
    }
    for (const Run& r : runs)  // what waits behind a marker still to come: the next drain's
        held_back_.insert(held_back_.end(), draining_.begin() + ptrdiff_t(r.at), draining_.begin() + ptrdiff_t(r.end));
    draining_.clear();
}

void Recorder::record(const Queued& q) {
    uint64_t& next = next_seq_[lane(q.event)];
    next = std::max(next, q.seq + 1);
    if (q.event.kind == EventKind::step) steps_recorded_.fetch_add(1, std::memory_order_relaxed);
    if (q.event.kind == EventKind::alloc) allocations_.fetch_add(1, std::memory_order_relaxed);
    else if (is_external_alloc(q.event.kind)) external_allocations_.fetch_add(1, std::memory_order_relaxed);
    writer_->event(q.event);
    if (!sinks_.empty()) batch_.push_back(q.event);
}

// The stacks met since the last drain, then this drain's events: a sink never sees a stack id
// before its frames. The stacks are taken after the threads' buffers were, so every stack their
// events name is among them.
void Recorder::hand_to_sinks() {
    std::vector<NewStack> stacks;
    std::vector<std::pair<uint32_t, std::string>> names;
    {
        std::lock_guard lock(intern_mutex_);
        stacks.swap(new_stacks_);
        names.swap(new_names_);
    }
    for (EventSink* sink : sinks_) {
        for (const NewStack& added : stacks) sink->stack(added.stack, added.frames);
        for (const auto& [id, text] : names) sink->name(id, text);
        if (!batch_.empty()) sink->events(batch_);
    }
    batch_.clear();
}

Event Recorder::mark(EventKind kind, std::string_view name) {
    Event e;
    e.kind = kind;
    e.time_us = clock_.now_us();
    std::lock_guard lock(intern_mutex_);
    if (writer_) e.name = writer_->intern_string(name);
    return e;
}

Event Recorder::pool_event(const PoolReading& r) {
    Event e;
    e.kind = EventKind::pool_usage;
    e.device = r.device;
    e.size = r.in_use;
    e.addr = r.pool;
    e.time_us = clock_.now_us();
    std::lock_guard lock(intern_mutex_);
    if (!writer_) return e;
    auto [it, added] = pool_names_.try_emplace(r.library, 0);
    if (added) {
        it->second = writer_->intern_string(r.library);
        new_names_.emplace_back(it->second, r.library);
    }
    e.name = it->second;
    return e;
}

bool Recorder::enqueue_marks(const std::vector<Event>& marks) {
    if (marks.empty()) return false;
    try {
        HookThread* t = this_thread();
        if (!t) [[unlikely]] return fail("capture stopped: out of memory"), false;
        // The cuts are read under the marks' lock: a drain looks for the open group under it after
        // taking the queues, so what it recorded with no group to stop it is inside these cuts,
        // and two threads' groups are numbered in the order of their cuts.
        std::lock_guard lock(marks_mutex_);
        MarkGroup g;
        g.cuts = cuts_now();
        for (const Event& e : marks) t->events.push(Queued{e, next_mark_++});
        g.last = next_mark_ - 1;
        const bool after_memory = !g.cuts.empty();
        mark_groups_.push_back(std::move(g));
        return after_memory;
    } catch (const std::exception& ex) {
        fail(std::string("capture stopped: ") + ex.what());
        return false;
    }
}

std::vector<Recorder::Cut> Recorder::cuts_now() {
    std::vector<Cut> cuts;
    for (size_t d = 0; d < device_lanes_.size(); ++d) {  // a free request still waiting is not numbered yet
        const uint64_t next = device_lanes_[d].next.load(std::memory_order_relaxed);
        if (next) cuts.push_back(Cut{uint32_t(d), next});
    }
    std::lock_guard driver(driver_.lock);
    for (size_t d = 0; d < driver_seq_.size(); ++d)
        if (driver_seq_[d]) cuts.push_back(Cut{uint32_t(256 + d), driver_seq_[d]});
    return cuts;
}

void Recorder::marker(EventKind kind, std::string_view name) {
    if (stopped_.load(std::memory_order_relaxed)) return;
    try {
        enqueue_marks({mark(kind, name)});
    } catch (const std::exception& ex) {
        fail(std::string("capture stopped: ") + ex.what());
    }
}

void Recorder::end_step(std::string_view unit, const std::vector<PoolReading>& pools) {
    if (stopped_.load(std::memory_order_relaxed)) return;
    try {
        // The monitor's word on the step before reaches the caller at this one at the latest: when
        // the worker has not drained that step yet (steps shorter than its period), this one does.
        if (steps_recorded_.load(std::memory_order_relaxed) < steps_.load(std::memory_order_relaxed)) drain();
        // This step end as the analysis will number it. One that no memory event precedes it
        // forgets, with any reading taken there: so none is asked for there.
        const uint64_t step = steps_after_memory_.load(std::memory_order_relaxed);
        const bool asked = step >= usage_from_step_.load(std::memory_order_relaxed) &&
                           step <= usage_through_step_.load(std::memory_order_relaxed) &&
                           (step > 0 || !cuts_now().empty());
        std::vector<Event> marks = usage_events(read_usage(asked));
        for (const PoolReading& r : pools) marks.push_back(pool_event(r));
        marks.push_back(mark(EventKind::step, unit));
        if (enqueue_marks(marks)) steps_after_memory_.fetch_add(1, std::memory_order_relaxed);
        steps_.fetch_add(1, std::memory_order_relaxed);
    } catch (const std::exception& ex) {
        fail(std::string("capture stopped: ") + ex.what());
    }
}

void Recorder::drain() {
    if (stopped_.load(std::memory_order_relaxed)) return;
    try {
        std::lock_guard lock(mutex_);
        drain_locked();
    } catch (const std::exception& ex) {
        fail(std::string("capture stopped: ") + ex.what());
    }
}

void Recorder::flush() {
    if (stopped_.load(std::memory_order_relaxed)) return;
    try {
        std::lock_guard lock(mutex_);
        drain_locked();
        writer_->flush();
    } catch (const std::exception& ex) {
        fail(std::string("capture stopped: ") + ex.what());
    }
}

void Recorder::close() {
    // NVML's figure as the run ends, read before the drain's lock is taken.
    const auto last = stopped_.load(std::memory_order_relaxed) ? std::vector<DeviceUsage::Reading>{} : read_usage(true);
    {
        std::lock_guard lock(worker_mutex_);
        closing_ = true;
    }
    worker_wake_.notify_all();
    if (worker_ && worker_->joinable()) worker_->join();
    std::lock_guard lock(mutex_);
    if (!writer_) return;
    const bool healthy = !stopped_.exchange(true);
    if (healthy) {
        drain_locked(true);
        const std::vector<Event> events = usage_events(last);
        for (const Event& e : events) writer_->event(e);
        for (EventSink* sink : sinks_) sink->events(events);
    }
    std::unique_ptr<TraceWriter> w;
    {
        std::lock_guard intern(intern_mutex_);  // no hook call is inside with the writer now
        w = std::move(writer_);
    }
    w->close();  // may throw (disk full): the caller reports it
    if (allocations_.load(std::memory_order_relaxed) == 0 && external_allocations_.load(std::memory_order_relaxed) == 0)
        ::unlink(path_.c_str());
}

void Recorder::abandon() noexcept {
    stopped_ = true;
    // Neither the worker thread nor the file is ours in the child: forget both, touch neither.
    (void)worker_.release();
    (void)writer_.release();
}

std::string Recorder::fault() const {
    std::lock_guard lock(fault_mutex_);
    return fault_;
}

}  // namespace vramscope::capture
