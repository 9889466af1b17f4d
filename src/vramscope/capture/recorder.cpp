#include "capture/recorder.h"

#include <unistd.h>

#include <chrono>

#include "analysis/sites.h"
#include "common/format.h"

namespace vramscope::capture {
namespace {

constexpr size_t kMaxFrames = 256;
constexpr const char* kAutogradFile = "<autograd engine>";

uint64_t hash_stack(const RawFrame* frames, size_t n, const char* node) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ uint64_t(reinterpret_cast<uintptr_t>(node));
    for (size_t i = 0; i < n; ++i) {
        h = (h ^ uint64_t(reinterpret_cast<uintptr_t>(frames[i].code))) * 0xFF51AFD7ED558CCDull;
        h = (h ^ uint64_t(uint32_t(frames[i].offset))) * 0xC4CEB9FE1A85EC53ull;
    }
    return h ^ (h >> 29);
}

}  // namespace

Recorder::Recorder(const std::string& path) : path_(path), writer_(std::make_unique<TraceWriter>(path)) {
    static std::atomic<uint64_t> recorders{0};
    id_ = ++recorders;
    step_name_ = writer_->intern_string("step");
    worker_ = std::make_unique<std::thread>([this] { worker(); });
}

Recorder::~Recorder() {
    try {
        close();
    } catch (...) {
    }
}

void Recorder::worker() {
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

void Recorder::meta(std::string_view key, std::string_view value) {
    if (writer_) writer_->meta(key, value);
}

void Recorder::device(uint8_t device, uint64_t total_memory, uint64_t allocated, uint64_t reserved) {
    if (!writer_) return;
    writer_->device(DeviceInfo{device, total_memory, allocated, reserved});
    std::lock_guard lock(mutex_);
    monitor_.set_capacity(device, total_memory, allocated);
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

uint32_t Recorder::frame_of(const RawFrame& f, bool& internal) {
    auto code = code_text_.find(f.code);
    if (code == code_text_.end()) {
        CodeInfo info = describe_code(f.code);
        const bool is_internal = is_internal_frame(info.file);
        code = code_text_.emplace(f.code, CodeText{std::move(info.file), std::move(info.function), is_internal}).first;
    }
    internal = code->second.internal;
    auto [it, inserted] = frame_ids_.try_emplace(f, 0);
    if (inserted) {
        const uint32_t line = line_of(f.code, f.offset);
        it->second = writer_->intern_frame(code->second.file, line, code->second.function);
        site_lines_.try_emplace(it->second, SourceLine{code->second.file, line, code->second.function});
    }
    return it->second;
}

// A stack seen for the first time: its frames into the writer's tables, innermost first; the
// autograd node, when there is one, is the outermost frame (the engine called it).
uint32_t Recorder::intern(const RawFrame* frames, size_t n, const char* node, uint32_t& site) {
    std::vector<uint32_t> ids;
    ids.reserve(n + 1);
    SitePick pick;
    for (size_t i = 0; i < n; ++i) {
        bool internal = false;
        const uint32_t id = frame_of(frames[i], internal);
        ids.push_back(id);
        pick.see(id, internal ? FrameRank::library : FrameRank::user);
    }
    if (node) {
        auto [it, inserted] = node_frames_.try_emplace(node, 0);
        if (inserted) {
            it->second = writer_->intern_frame(kAutogradFile, 0, node);
            site_lines_.try_emplace(it->second, SourceLine{kAutogradFile, 0, node});
        }
        ids.push_back(it->second);
        pick.see(it->second, FrameRank::user);  // outermost: any user frame above it came first
    }
    site = pick.site;
    return writer_->intern_stack(ids.data(), ids.size());
}

uint32_t Recorder::stack_of(const RawFrame* frames, size_t n, const char* node, uint32_t& site) {
    uint64_t h = hash_stack(frames, n, node);
    for (;; h = h * 0x9E3779B97F4A7C15ull + 1) {  // probe on the (rare) hash collision
        auto [it, inserted] = stack_by_hash_.try_emplace(h, uint32_t(stacks_.size()));
        if (inserted) {
            CachedStack c{std::vector<RawFrame>(frames, frames + n), node, 0, 0};
            c.stack = intern(frames, n, node, c.site);
            stacks_.push_back(std::move(c));
            site = stacks_.back().site;
            return stacks_.back().stack;
        }
        const CachedStack& c = stacks_[it->second];
        if (c.node == node && c.frames.size() == n && std::equal(frames, frames + n, c.frames.begin())) {
            site = c.site;
            return c.stack;
        }
    }
}

void Recorder::allocator_event(EventKind kind, uint8_t device, uint64_t addr, uint64_t size, uint64_t stream,
                               const char* node) noexcept {
    if (stopped_.load(std::memory_order_relaxed)) return;
    try {
        thread_local RawFrame frames[kMaxFrames];
        Queued q{Event{}, 0};
        Event& e = q.event;
        e.kind = kind;
        e.device = device;
        e.addr = addr;
        e.size = size;
        e.time_us = clock_.now_us();
        const bool wants_stack = has_stack(kind);
        const size_t n =
            wants_stack && python_stacks_.load(std::memory_order_relaxed) ? walk_python_frames(frames, kMaxFrames) : 0;
        // Streams are few: each thread keeps the ones it met, so a free takes no shared lock.
        thread_local std::pair<uint64_t, uint16_t> known_streams[8];
        thread_local size_t known = 0;
        thread_local uint64_t known_for = 0;
        if (known_for != id_) known_for = id_, known = 0;
        size_t i = 0;
        while (i < known && known_streams[i].first != stream) ++i;
        if (i < known) e.stream = known_streams[i].second;
        if (i == known || (wants_stack && (n || node))) {
            std::lock_guard lock(intern_mutex_);
            if (!writer_) return;  // closed while this event was on its way
            if (i == known) {
                e.stream = stream_index(stream);
                if (known < 8) known_streams[known++] = {stream, e.stream};
            }
            if (wants_stack && (n || node)) e.stack = stack_of(frames, n, node, q.site);
        }
        if (kind == EventKind::alloc) allocations_.fetch_add(1, std::memory_order_relaxed);
        {
            std::lock_guard lock(queue_mutex_);
            queue_.push_back(q);
        }
        if (kind == EventKind::oom) flush();  // on disk before the exception reaches anyone
    } catch (const std::exception& ex) {
        fail(std::string("capture stopped: ") + ex.what());
    } catch (...) {
        fail("capture stopped: unknown internal error");
    }
}

// Queued events into the file and the monitor, in the order the hook saw them.
void Recorder::drain_locked() {
    {
        std::lock_guard lock(queue_mutex_);
        std::swap(queue_, draining_);
    }
    for (const Queued& q : draining_) {
        const Event& e = q.event;
        writer_->event(e);
        if (e.kind == EventKind::alloc) monitor_.alloc(e.device, e.addr, e.size, q.site);
        else if (is_release(e.kind)) monitor_.release(e.device, e.addr);
    }
    draining_.clear();
}

void Recorder::marker(EventKind kind, std::string_view name) {
    if (stopped_.load(std::memory_order_relaxed)) return;
    try {
        std::lock_guard lock(mutex_);
        drain_locked();
        Event e;
        e.kind = kind;
        e.time_us = clock_.now_us();
        e.name = writer_->intern_string(name);
        writer_->event(e);
    } catch (const std::exception& ex) {
        fail(std::string("capture stopped: ") + ex.what());
    }
}

std::vector<LiveFinding> Recorder::end_step() {
    std::vector<LiveFinding> out;
    if (stopped_.load(std::memory_order_relaxed)) return out;
    try {
        std::vector<LiveLeak> leaks;
        {
            std::lock_guard lock(mutex_);
            drain_locked();
            Event e;
            e.kind = EventKind::step;
            e.time_us = clock_.now_us();
            e.name = step_name_;
            writer_->event(e);
            leaks = monitor_.end_step();
        }
        out = described(std::move(leaks));
    } catch (const std::exception& ex) {
        fail(std::string("capture stopped: ") + ex.what());
    }
    return out;
}

std::vector<LiveFinding> Recorder::leaking() {
    std::vector<LiveLeak> leaks;
    {
        std::lock_guard lock(mutex_);
        if (!stopped_.load(std::memory_order_relaxed)) drain_locked();
        leaks = monitor_.leaking();
    }
    return described(std::move(leaks));
}

// The monitor's frame ids as source lines.
std::vector<LiveFinding> Recorder::described(std::vector<LiveLeak> leaks) {
    std::vector<LiveFinding> out;
    std::lock_guard lock(intern_mutex_);
    for (LiveLeak& leak : leaks) {
        auto site = site_lines_.find(leak.site);
        out.push_back(LiveFinding{site != site_lines_.end() ? site->second : SourceLine{kNoPythonFrame, 0, ""},
                                  leak.device, leak.shape, leak.bytes_per_step, leak.first_step,
                                  leak.projected_oom_step, std::move(leak.newest_blocks)});
    }
    return out;
}

uint64_t Recorder::steps() const {
    std::lock_guard lock(mutex_);
    return monitor_.steps();
}

std::optional<uint64_t> Recorder::projected_oom_step() const {
    std::lock_guard lock(mutex_);
    return monitor_.projected_oom_step();
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
    {
        std::lock_guard lock(worker_mutex_);
        closing_ = true;
    }
    worker_wake_.notify_all();
    if (worker_ && worker_->joinable()) worker_->join();
    std::lock_guard lock(mutex_);
    if (!writer_) return;
    const bool healthy = !stopped_.exchange(true);
    if (healthy) drain_locked();
    std::unique_ptr<TraceWriter> w;
    {
        std::lock_guard intern(intern_mutex_);  // no hook call is inside with the writer now
        w = std::move(writer_);
    }
    w->close();  // may throw (disk full): the caller reports it
    if (allocations_.load(std::memory_order_relaxed) == 0) ::unlink(path_.c_str());
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
