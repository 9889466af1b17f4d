// Whole-file input: every reader takes bytes, so importers, the trace reader and tests share
// one way in.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <string>
#include <vector>
#include <string_view>


namespace vramscope {

// Leaves new bytes uninitialized: a buffer about to be filled by read() or inflate() need not be
// zeroed first (for a 91 MB snapshot that was a whole pass over memory before parsing could start).
template <class T> struct UninitializedAllocator : std::allocator<T> {
    template <class U> struct rebind {
        using other = UninitializedAllocator<U>;
    };
    template <class U, class... Args> void construct(U* p, Args&&... args) {
        if constexpr (sizeof...(Args) == 0) ::new (static_cast<void*>(p)) U;
        else ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
};

using Bytes = std::vector<char, UninitializedAllocator<char>>;

inline std::string_view view(const Bytes& b) { return {b.data(), b.size()}; }

// Throws std::runtime_error naming the path on any failure.
// Size in bytes; 0 when it cannot be told (the read that follows says why).
uint64_t file_size(const std::string& path);

// A regular file only: a FIFO, a device or a socket may never end, so it is refused (opened
// without blocking, so a FIFO with no writer cannot hang the open either). More than
// `max_bytes` is refused too.
Bytes read_file(const std::string& path, uint64_t max_bytes = UINT64_MAX);
// The same checks; returns the open descriptor (the caller closes it) and the file's size.
int open_regular_file(const std::string& path, uint64_t max_bytes, uint64_t& size);

// The one way a file is written: whole or not at all. `write` fills a temporary file beside path
// (created for it, named in no error), which is then renamed over path, so a reader, or a second
// writer into the same path, never sees part of a file. An existing path that is not a regular
// file (/dev/null, a pipe) is written in place: it cannot be replaced, nor be torn. Errors read
// "PATH: cannot write the WHAT: REASON" (the errno text).
void replace_file(const std::string& path, const char* what, const std::function<void(const std::string&)>& write);
// replace_file with data, a failed close included: a full disk often only says so there.
void write_file(const std::string& path, std::string_view data, const char* what);
// All of data to stdout (fd 1), unbuffered; throws "stdout: REASON" when it cannot.
void write_stdout(std::string_view data);
// What write_stdout throws when the reader went away (`vramscope analyze F | head -1`): the command
// then ends quietly, as `git log | head` does.
struct StdoutClosed : std::runtime_error {
    StdoutClosed() : std::runtime_error("stdout: the reader closed it") {}
};
// Whether two paths name one file (an output that would overwrite an input): the same path once
// links and dots are resolved (the file need not exist yet), or the same device and inode (a
// hard link, a bind mount).
bool same_file(const std::string& a, const std::string& b);

bool is_gzip(std::string_view bytes);

}  // namespace vramscope
