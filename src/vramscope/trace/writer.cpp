#include "trace/writer.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

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
bool aligned(uint64_t v) { return (v & ((1u << kAlignShift) - 1)) == 0; }
}  // namespace

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
            throw std::runtime_error(path_ + ": write failed: " + std::strerror(errno));
        }
        data += k;
        n -= size_t(k);
        bytes_written_ += uint64_t(k);
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
    buf_.push_back(char(tag_string));
    put_bytes(buf_, table_.string(id));
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

void TraceWriter::event(const Event& e) {
    std::lock_guard lock(mutex_);
    if (has_pending_free_) {
        has_pending_free_ = false;
        const Event& p = pending_free_;
        if (e.kind == EventKind::free_completed && e.addr == p.addr && e.size == p.size &&
            e.device == p.device && e.stream == p.stream && e.time_us >= p.time_us) {
            emit_locked(p, &e);
            return;
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
    if (!context_set_ || e.device != cur_device_ || e.stream != cur_stream_) {
        buf_.push_back(char(tag_context));
        put_varint(buf_, e.device);
        put_varint(buf_, e.stream);
        cur_device_ = e.device;
        cur_stream_ = e.stream;
        context_set_ = true;
    }
    if (!chunk_has_time_) {
        buf_.push_back(char(tag_chunk_time));
        put_varint(buf_, zigzag(e.time_us));
        last_time_ = e.time_us;
        chunk_has_time_ = true;
    }
    const bool carries_block = is_block_event(e.kind) || is_segment_event(e.kind) || e.kind == EventKind::oom;
    const bool packed = carries_block && aligned(e.addr) && aligned(e.size);
    const uint8_t tag = completed ? uint8_t(tag_free_both) : uint8_t(kEventBase + uint8_t(e.kind));
    buf_.push_back(char(tag | (packed ? kAligned : 0)));
    put_varint(buf_, zigzag(e.time_us - last_time_));
    last_time_ = e.time_us;
    if (carries_block) {
        const unsigned shift = packed ? kAlignShift : 0;
        put_varint(buf_, zigzag(int64_t(e.addr >> shift) - int64_t(last_addr_ >> shift)));
        put_varint(buf_, e.size >> shift);
        last_addr_ = e.addr;
        if (completed) {
            put_varint(buf_, uint64_t(completed->time_us - e.time_us));
            last_time_ = completed->time_us;
        } else if (e.kind != EventKind::free_requested && e.kind != EventKind::free_completed) {
            put_varint(buf_, e.stack);
        }
    } else {
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
    std::string head;
    put_u32(head, kChunkMagic);
    put_u32(head, uint32_t(buf_.size()));
    put_u32(head, uint32_t(crc32(0, reinterpret_cast<const Bytef*>(buf_.data()), uInt(buf_.size()))));
    // One write for header and payload keeps a chunk whole unless the process dies inside write().
    head.append(buf_);
    buf_.clear();
    chunk_has_time_ = false;
    context_set_ = false;
    last_addr_ = 0;
    write_all(head.data(), head.size());
}

void TraceWriter::flush() {
    std::lock_guard lock(mutex_);
    flush_locked();
}

void TraceWriter::close() {
    std::lock_guard lock(mutex_);
    if (fd_ < 0) return;
    flush_locked();
    ::close(fd_);
    fd_ = -1;
}

void write_trace(const Trace& trace, const std::string& path) {
    TraceWriter w(path);
    w.meta("format", trace.format);
    w.meta("source", trace.source);
    for (const auto& [k, v] : trace.meta) w.meta(k, v);
    for (const auto& d : trace.devices) w.device(d);
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
