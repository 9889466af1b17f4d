#include "trace/writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "common/inflate.h"
#include "trace/format.h"
#include "trace/varint.h"

namespace vramscope {
using namespace format;

namespace {
void put_u32(std::string& out, uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(char(v >> (8 * i)));
}
void put_bytes(std::string& out, std::string_view s) {
    put_varint(out, s.size());
    out.append(s);
}
}  // namespace

// One block event, or a free pair when its completion comes with it. Fields go in the order
// the reader needs to replay the same guesses: an alloc's size is guessed from its stack, its
// address from its size; every other event's size from its address.
void TraceWriter::emit_block_locked(const Event& e, const Event* completed) {
    const bool pair = completed != nullptr;  // a free_requested whose completion came later
    const int64_t done_after = pair ? completed->time_us - e.time_us : 0;
    const bool same_time = e.time_us == last_time_;
    const bool is_alloc = e.kind == EventKind::alloc;
    uint8_t type = pair ? uint8_t(tag_free_pair_later) : tag_of_kind(uint8_t(e.kind));
    uint8_t flags = same_time ? kSameTime : 0;
    const bool stack_guessed = has_stack(e.kind) && e.stack != 0 && guess_.next_stack() == e.stack;
    if (stack_guessed) flags |= kGuessed;
    const uint64_t size_guess = guess_.size(e.kind, e.addr, e.stack);
    if (size_guess != 0 && size_guess == e.size) flags |= kSizeKnown;
    const int recent = is_alloc || has_stack(e.kind) ? -1 : guess_.recent_index(e.addr);
    if (recent >= 0) flags |= kGuessed;
    if (is_alloc && guess_.alloc_address(e.size) == e.addr && e.addr != 0) type = tag_alloc_reused;
    const bool unaligned = (e.addr & 511) || (!(flags & kSizeKnown) && (e.size & 511));
    const unsigned shift = unaligned ? 0 : kAlignShift;
    if (unaligned) buf_.push_back(char(tag_unaligned));
    buf_.push_back(char(type | flags));
    if (!same_time) put_varint(buf_, zigzag(e.time_us - last_time_));
    last_time_ = e.time_us;
    uint64_t& last_addr = last_addr_[cur_context_ - 1];
    auto put_addr = [&] {
        if (recent >= 0) {
            buf_.push_back(char(recent));
        } else if (type != tag_alloc_reused) {
            put_varint(buf_, zigzag(int64_t(e.addr >> shift) - int64_t(last_addr >> shift)));
        }
        last_addr = e.addr;
    };
    if (!is_alloc) put_addr();
    if (has_stack(e.kind) && !stack_guessed) put_varint(buf_, e.stack);
    if (!(flags & kSizeKnown)) put_varint(buf_, e.size >> shift);
    if (is_alloc) put_addr();
    if (pair) put_varint(buf_, uint64_t(done_after));
    if (pair) last_time_ = completed->time_us;
    guess_.update(e.kind, e.addr, e.size, e.stack);
    if (pair) guess_.update(EventKind::free_completed, e.addr, e.size, 0);
}

TraceWriter::TraceWriter(const std::string& path, size_t chunk_bytes)
    : path_(path), chunk_bytes_(chunk_bytes) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error(path + ": cannot create trace file: " + std::strerror(errno));
    std::string header(kMagic, sizeof kMagic);
    header.push_back(char(kVersion & 0xff));
    header.push_back(char(kVersion >> 8));
    header.append(2, '\0');
    write_all(header.data(), header.size());
    buf_.reserve(chunk_bytes_ + 256);
}

TraceWriter::~TraceWriter() {
    try {
        close();
    } catch (...) {
    }
}

void TraceWriter::write_all(const char* data, size_t n) {
    while (n > 0) {
        ssize_t k = ::write(fd_, data, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            write_failed_ = true;
            throw std::runtime_error(path_ + ": write failed: " + std::strerror(errno));
        }
        data += k;
        n -= size_t(k);
    }
}

void TraceWriter::meta(std::string_view key, std::string_view value) {
    std::lock_guard lock(mutex_);
    buf_.push_back(char(tag_meta));
    put_bytes(buf_, key);
    put_bytes(buf_, value);
    maybe_flush_locked();
}

void TraceWriter::device(const DeviceInfo& d) {
    std::lock_guard lock(mutex_);
    buf_.push_back(char(tag_device));
    put_varint(buf_, d.device);
    put_varint(buf_, d.total_memory);
    put_varint(buf_, d.baseline_allocated);
    put_varint(buf_, d.baseline_reserved);
    maybe_flush_locked();
}

void TraceWriter::define_string(uint32_t id) {
    if (id <= defined_strings_) return;
    // Front-coded against whichever of the last 8 strings shares the longest prefix: paths
    // share long ones, and file and function names alternate.
    const std::string_view s = table_.string(id);
    size_t common = 0, back = 0;
    for (size_t k = 1; k <= 8 && k < id; ++k) {
        const std::string_view prev = table_.string(uint32_t(id - k));
        size_t n = 0;
        while (n < s.size() && n < prev.size() && s[n] == prev[n]) ++n;
        if (n > common) common = n, back = k - 1;
    }
    buf_.push_back(char(tag_string));
    put_varint(buf_, common << 3 | back);
    put_bytes(buf_, s.substr(common));
    defined_strings_ = id;
}

uint32_t TraceWriter::intern_string(std::string_view s) {
    std::lock_guard lock(mutex_);
    uint32_t id = table_.intern_string(s);
    define_string(id);
    return id;
}

uint32_t TraceWriter::intern_frame(std::string_view file, uint32_t line, std::string_view function) {
    std::lock_guard lock(mutex_);
    uint32_t f = table_.intern_string(file);
    define_string(f);
    uint32_t fn = table_.intern_string(function);
    define_string(fn);
    uint32_t id = table_.intern_frame(Frame{f, fn, line});
    if (id > defined_frames_) {
        buf_.push_back(char(tag_frame));
        put_varint(buf_, f);
        put_varint(buf_, fn);
        put_varint(buf_, line);
        defined_frames_ = id;
    }
    return id;
}

uint32_t TraceWriter::intern_stack_node(uint32_t parent, uint32_t frame) {
    std::lock_guard lock(mutex_);
    uint32_t id = table_.intern_stack(parent, frame);
    if (id > defined_stacks_) {
        buf_.push_back(char(tag_stack));
        put_varint(buf_, parent);
        put_varint(buf_, frame);
        defined_stacks_ = id;
    }
    return id;
}

uint32_t TraceWriter::intern_stack(const uint32_t* frames, size_t count) {
    uint32_t node = 0;
    for (size_t i = count; i-- > 0;) node = intern_stack_node(node, frames[i]);
    return node;
}

uint16_t TraceWriter::intern_stream(uint64_t handle) {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < streams_.size(); ++i)
        if (streams_[i] == handle) return uint16_t(i);
    streams_.push_back(handle);
    return uint16_t(streams_.size() - 1);
}

void TraceWriter::event(const Event& e) {
    std::lock_guard lock(mutex_);
    if (has_pending_free_) {
        has_pending_free_ = false;
        const Event& p = pending_free_;
        if (completes(p, e)) {
            if (e.time_us > p.time_us) return emit_locked(p, &e);
            Event whole = p;
            whole.kind = EventKind::free;
            return emit_locked(whole, nullptr);
        }
        emit_locked(p, nullptr);
    }
    if (e.kind == EventKind::free_requested) {
        pending_free_ = e;
        has_pending_free_ = true;
        return;
    }
    emit_locked(e, nullptr);
}

void TraceWriter::emit_locked(const Event& e, const Event* completed) {
    const std::pair<uint16_t, uint64_t> context(e.device, e.stream < streams_.size() ? streams_[e.stream] : 0);
    if (cur_context_ == 0 || contexts_[cur_context_ - 1] != context) {
        size_t i = 0;
        while (i < contexts_.size() && contexts_[i] != context) ++i;
        buf_.push_back(char(tag_context));
        put_varint(buf_, i);
        if (i == contexts_.size()) {
            put_varint(buf_, context.first);
            put_varint(buf_, context.second);
            contexts_.push_back(context);
            last_addr_.push_back(0);
        }
        cur_context_ = uint32_t(i + 1);
    }
    if (!chunk_has_time_) {
        buf_.push_back(char(tag_chunk_time));
        put_varint(buf_, zigzag(e.time_us));
        last_time_ = e.time_us;
        chunk_has_time_ = true;
    }
    if (carries_address(e.kind)) {
        emit_block_locked(e, completed);
    } else if (is_pool_reading(e.kind)) {  // its library's name, then its two byte counts, unshifted
        const bool same_time = e.time_us == last_time_;
        buf_.push_back(char(tag_of_kind(uint8_t(e.kind)) | (same_time ? kSameTime : 0)));
        if (!same_time) put_varint(buf_, zigzag(e.time_us - last_time_));
        last_time_ = e.time_us;
        put_varint(buf_, e.name);
        put_varint(buf_, e.addr);
        put_varint(buf_, e.size);
    } else {
        const bool same_time = e.time_us == last_time_;
        buf_.push_back(char(tag_of_kind(uint8_t(e.kind)) | (same_time ? kSameTime : 0)));
        if (!same_time) put_varint(buf_, zigzag(e.time_us - last_time_));
        last_time_ = e.time_us;
        put_varint(buf_, e.name);
    }
    events_written_ += completed ? 2 : 1;
    maybe_flush_locked();
}

void TraceWriter::maybe_flush_locked() {
    if (buf_.size() >= chunk_bytes_) flush_locked();
}

void TraceWriter::flush_locked() {
    if (has_pending_free_) {
        has_pending_free_ = false;
        emit_locked(pending_free_, nullptr);
    }
    if (fd_ < 0 || buf_.empty()) return;
    // The chunk's number first: a reader tells a duplicated, swapped or dropped chunk.
    std::string payload(1, char(tag_chunk_seq));
    put_varint(payload, chunks_written_++);
    payload += buf_;
    std::string head;
    put_u32(head, kChunkMagic);
    put_u32(head, uint32_t(payload.size()));
    put_u32(head, crc32_of(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()));
    // One write for header and payload keeps a chunk whole unless the process dies inside write().
    head.append(payload);
    buf_.clear();
    chunk_has_time_ = false;
    cur_context_ = 0;
    std::fill(last_addr_.begin(), last_addr_.end(), 0);
    write_all(head.data(), head.size());
}

void TraceWriter::flush() {
    std::lock_guard lock(mutex_);
    flush_locked();
}

void TraceWriter::close() {
    std::lock_guard lock(mutex_);
    if (fd_ < 0) return;
    if (!write_failed_) {
        flush_locked();
        buf_.push_back(char(tag_end));  // in a chunk of its own: a file cut at a chunk boundary lacks it
        put_varint(buf_, events_written_);
        flush_locked();
    }
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw std::runtime_error(path_ + ": write failed: " + std::strerror(errno));
}

void write_trace(const Trace& trace, const std::string& path, size_t chunk_bytes) {
    TraceWriter w(path, chunk_bytes);
    w.meta("format", trace.format);
    w.meta("source", trace.source);
    for (const auto& [k, v] : trace.meta) w.meta(k, v);
    for (const auto& d : trace.devices) w.device(d);
    for (uint64_t handle : trace.streams) w.intern_stream(handle);
    // A fresh table hands out ids in order, so re-interning in id order keeps every id.
    const StackTable& t = trace.stacks;
    for (uint32_t i = 1; i <= t.string_count(); ++i) w.intern_string(t.string(i));
    for (uint32_t i = 1; i <= t.frame_count(); ++i) {
        const Frame& f = t.frame(i);
        w.intern_frame(t.string(f.file), f.line, t.string(f.function));
    }
    for (uint32_t i = 1; i <= t.stack_count(); ++i) w.intern_stack_node(t.node(i).parent, t.node(i).frame);
    for (const Event& e : trace.events) w.event(e);
    w.close();
}

}  // namespace vramscope
