// The pages of a buffer being filled, faulted in on a second thread a window ahead of the writer.
// On the VMs we measure on, the first touch of a page costs the writing thread about a
// microsecond (a trap, a zeroed page): 10-15 % of importing a snapshot, whose events fill a
// buffer of tens to hundreds of MB. madvise(MADV_POPULATE_WRITE) does the same work in bulk, on a
// core the import leaves mostly idle. It never writes the memory (prefaulting a page someone
// already wrote keeps its content), so it is safe whatever the writer does meanwhile.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>

namespace vramscope {

class Prefault {
public:
    explicit Prefault(size_t window_bytes = size_t(8) << 20);
    ~Prefault();  // stops the thread, whatever it was doing
    Prefault(const Prefault&) = delete;
    Prefault& operator=(const Prefault&) = delete;

    // The buffer [begin, end) is written in order and now holds data up to `written`: fault in
    // its pages up to a window past that. Cheap: call it every few hundred KB written.
    void ahead_of(const void* begin, const void* end, const void* written);

private:
    void run();

    const size_t window_;
    std::mutex mutex_;
    std::condition_variable cv_;
    const char* begin_ = nullptr;  // the buffer asked for, and how far to fault it in
    const char* target_ = nullptr;
    bool stop_ = false;
    std::thread worker_;  // last: started once everything it uses exists
};

}  // namespace vramscope
