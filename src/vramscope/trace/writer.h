// Streams events to a .vscope file in self-contained chunks. Thread-safe; memory stays bounded by
// one chunk plus the intern tables (which grow with distinct stacks, not with time).
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "events/event.h"
#include "events/stack_table.h"
#include "events/trace.h"
#include "trace/format.h"
#include "trace/predict.h"

namespace vramscope {

class TraceWriter {
public:
    // Opens (truncates) path and writes the header; throws std::runtime_error naming the path.
    explicit TraceWriter(const std::string& path, size_t chunk_bytes = 64 * 1024);
    ~TraceWriter();  // flushes; never throws
    TraceWriter(const TraceWriter&) = delete;
    TraceWriter& operator=(const TraceWriter&) = delete;

    void meta(std::string_view key, std::string_view value);
    void device(const DeviceInfo& info);

    uint32_t intern_string(std::string_view s);
    uint32_t intern_frame(std::string_view file, uint32_t line, std::string_view function);
    // A stack from frame ids, innermost first (as capture walks it).
    uint32_t intern_stack(const uint32_t* frames_innermost_first, size_t count);
    uint32_t intern_stack_node(uint32_t parent, uint32_t frame);

    // Stream indices used by events map to CUDA stream handles in the order interned here.
    uint16_t intern_stream(uint64_t handle);
    void event(const Event& e);

    // Ends the current chunk and hands it to the OS: what a reader sees after a crash.
    void flush();
    // Writes the end record and closes; throws naming the path and the reason on a failed write.
    void close();

private:
    void define_string(uint32_t id);
    void emit_locked(const Event& e, const Event* completed);
    void emit_block_locked(const Event& e, const Event* completed);
    void flush_locked();
    void maybe_flush_locked();
    void write_all(const char* data, size_t n);

    std::mutex mutex_;
    int fd_ = -1;
    std::string path_;
    size_t chunk_bytes_;
    std::string buf_;
    bool write_failed_ = false;  // the file is cut where it failed: no end record pretends otherwise
    uint64_t chunks_written_ = 0;
    uint64_t events_written_ = 0;  // as a reader will count them (a same-instant free pair is one)
    StackTable table_;
    size_t defined_strings_ = 0, defined_frames_ = 0, defined_stacks_ = 0;
    // Per-chunk delta state, reset at each chunk.
    bool chunk_has_time_ = false;
    int64_t last_time_ = 0;
    std::vector<uint64_t> last_addr_;  // per context: addresses are deltas within a stream's pool
    uint32_t cur_context_ = 0;  // 1-based index into contexts_; 0: none yet in this chunk
    std::vector<std::pair<uint16_t, uint64_t>> contexts_;  // (device, stream handle), in file order
    std::vector<uint64_t> streams_{0};
    // A free_requested held back one event: if its free_completed follows at once, both go out
    // as one record (a `free` when at one instant, the common case: a third of all events).
    bool has_pending_free_ = false;
    Event pending_free_;
    format::Predictors guess_;  // the reader keeps the same ones
};

// Writes a whole in-memory trace (what `vramscope convert` does).
void write_trace(const Trace& trace, const std::string& path, size_t chunk_bytes = 64 * 1024);

}  // namespace vramscope
