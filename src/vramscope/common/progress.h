// A progress line on stderr — "reading big.pickle.gz  [#####     ]  48%  1.6 s" — for work that
// has taken more than a second, and only on a terminal (pipes and CI logs get nothing). The
// reading code reports how far it got into whichever Progress is current; with none, for free.
// VRAMSCOPE_PROGRESS_AFTER=SECONDS moves the one-second threshold (0: always, the final line too).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace vramscope {

class Progress {
public:
    Progress(std::string label, uint64_t total);  // label: shown escaped (terminal_safe)
    ~Progress();  // erases the line
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    // From the work: units (input bytes) done so far.
    static void report(uint64_t done);

    // Whether this thread's reports reach the line: with several inputs read at once, only the
    // thread reading the one the line names says how far it got.
    class Reports {
    public:
        explicit Reports(bool reach);
        ~Reports();
        Reports(const Reports&) = delete;
        Reports& operator=(const Reports&) = delete;

    private:
        bool was_;
    };

private:
    void draw(double seconds);

    std::string label_;
    uint64_t total_;
    double after_ = 1.0;  // seconds before the line appears
    std::atomic<uint64_t> done_{0};
    bool drawn_ = false;
    std::mutex mutex_;
    std::condition_variable wake_;
    bool finished_ = false;
    std::thread thread_;
};

}  // namespace vramscope
