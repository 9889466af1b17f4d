// Prefault: pages come in a window ahead of the writer and no further, what is written stays
// written, and a buffer freed under it costs nothing.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/prefault.h"

using namespace vramscope;

namespace {
constexpr size_t kPage = 4096;

// Pages of [p, p + bytes) resident now.
size_t resident(const char* p, size_t bytes) {
    std::vector<unsigned char> in(bytes / kPage);
    if (mincore(const_cast<char*>(p), bytes, in.data()) != 0) return 0;
    size_t n = 0;
    for (unsigned char c : in) n += c & 1;
    return n;
}

bool eventually(auto&& done) {
    for (int i = 0; i < 2000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return done();
}
}  // namespace

TEST(Prefault, PagesComeAWindowAheadOfTheWriterAndNoFurther) {
    constexpr size_t kBytes = size_t(64) << 20, kWindow = size_t(8) << 20;
    char* buffer = static_cast<char*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(buffer, MAP_FAILED);
    madvise(buffer, kBytes, MADV_NOHUGEPAGE);  // pages of 4 KiB, so mincore counts what was faulted
    {
        Prefault prefault(kWindow);
        const size_t written = size_t(16) << 20;
        for (size_t i = 0; i < written; i += 64) {
            std::memset(buffer + i, int(i / 64 % 251), 64);
            if (i % (256 << 10) == 0) prefault.ahead_of(buffer, buffer + kBytes, buffer + i);
        }
        prefault.ahead_of(buffer, buffer + kBytes, buffer + written);
        const bool supported = eventually([&] { return resident(buffer + written, kWindow) == kWindow / kPage; });
        if (!supported && madvise(buffer, kPage, MADV_POPULATE_WRITE) != 0) GTEST_SKIP() << "no MADV_POPULATE_WRITE here";
        EXPECT_TRUE(supported) << resident(buffer + written, kWindow) << " of " << kWindow / kPage << " pages";
        EXPECT_EQ(resident(buffer + written + kWindow + kPage, kBytes - written - kWindow - kPage), 0u)
            << "faulted in past the window";
        for (size_t i = 0; i < written; i += 64) ASSERT_EQ(buffer[i], char(i / 64 % 251)) << i;
    }
    munmap(buffer, kBytes);
}

TEST(Prefault, ABufferFreedUnderItCostsNothing) {
    Prefault prefault(size_t(32) << 20);
    for (int round = 0; round < 20; ++round) {
        constexpr size_t kBytes = size_t(32) << 20;
        char* buffer = static_cast<char*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        ASSERT_NE(buffer, MAP_FAILED);
        prefault.ahead_of(buffer, buffer + kBytes, buffer);
        munmap(buffer, kBytes);  // while it may be faulting the buffer in
    }
}
