#include "common/progress.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "common/format.h"

namespace vramscope {
namespace {
std::atomic<Progress*> g_current{nullptr};
thread_local bool t_reports_reach = true;
}  // namespace

Progress::Reports::Reports(bool reach) : was_(t_reports_reach) { t_reports_reach = reach; }
Progress::Reports::~Reports() { t_reports_reach = was_; }

// The label holds the input's name: escaped, so that a name cannot drive the terminal.
Progress::Progress(std::string label, uint64_t total) : label_(terminal_safe(label)), total_(total) {
    if (!isatty(STDERR_FILENO)) return;
    if (const char* after = std::getenv("VRAMSCOPE_PROGRESS_AFTER")) after_ = std::atof(after);
    g_current.store(this);
    thread_ = std::thread([this] {
        const auto start = std::chrono::steady_clock::now();
        std::unique_lock lock(mutex_);
        while (!wake_.wait_for(lock, std::chrono::milliseconds(100), [this] { return finished_; })) {
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            if (s >= after_) draw(s);
        }
    });
}

Progress::~Progress() {
    if (!thread_.joinable()) return;
    Progress* self = this;
    g_current.compare_exchange_strong(self, nullptr);
    {
        std::lock_guard lock(mutex_);
        finished_ = true;
    }
    wake_.notify_all();
    thread_.join();
    if (after_ <= 0) {
        done_ = total_;
        draw(0);
    }
    if (drawn_) std::fputs("\r\033[K", stderr);
}

void Progress::report(uint64_t done) {
    if (!t_reports_reach) return;
    if (Progress* p = g_current.load(std::memory_order_relaxed)) p->done_.store(done, std::memory_order_relaxed);
}

void Progress::draw(double seconds) {
    const double share = total_ ? std::min(1.0, double(done_.load()) / double(total_)) : 0;
    char bar[21];
    for (int i = 0; i < 20; ++i) bar[i] = i < int(share * 20 + 0.5) ? '#' : ' ';
    bar[20] = 0;
    std::fprintf(stderr, "\r%s  [%s]  %3d%%  %.1f s", label_.c_str(), bar, int(share * 100), seconds);
    std::fflush(stderr);
    drawn_ = true;
}

}  // namespace vramscope
