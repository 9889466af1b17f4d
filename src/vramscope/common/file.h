// Whole-file input: every reader takes bytes, so importers, the trace reader and tests share
// one way in.
#pragma once
#include <cstdint>
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

// Creates or truncates path and writes data; throws "PATH: cannot write the WHAT: REASON" (the
// errno text), a failed close included: a full disk often only says so there.
void write_file(const std::string& path, std::string_view data, const char* what);
// All of data to stdout (fd 1), unbuffered; throws "stdout: REASON" when it cannot.
void write_stdout(std::string_view data);
// Whether two paths name one file (an output that would overwrite an input).
bool same_file(const std::string& a, const std::string& b);

bool is_gzip(std::string_view bytes);

// The first bytes (up to n) of the gzip'd content, to tell what it is; empty if unreadable.
std::string gunzip_prefix(std::string_view gz, size_t n);

}  // namespace vramscope
