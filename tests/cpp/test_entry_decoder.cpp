// The direct path (trace entries straight from the bytes, importers/entry_decoder.h) held to the
// generic one, the oracle: every fixture, and crafted traces of every shape the direct path reads
// or leaves to the generic one, whole and cut into chunks at every byte.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/chunk_source.h"
#include "common/file.h"
#include "common/gzip_stream.h"
#include "importers/torch_snapshot.h"

using namespace vramscope;

namespace {

// A Trace as text: every event with its stack (or name) spelled out, the live blocks, baselines,
// streams, warnings and faults. Stack ids depend on the order things were interned in; the text
// does not.
std::string described(const Trace& t) {
    std::ostringstream o;
    auto stack = [&](uint32_t id) {
        std::string s;
        for (; id != 0; id = t.stacks.node(id).parent) {
            const Frame& f = t.stacks.frame(t.stacks.node(id).frame);
            s += std::string(t.stacks.string(f.file)) + ":" + std::to_string(f.line) + ":" +
                 std::string(t.stacks.string(f.function)) + ";";
        }
        return s;
    };
    for (const Event& e : t.events) {
        o << int(e.kind) << ' ' << e.addr << ' ' << e.size << ' ' << e.time_us << ' ' << e.stream << ' ' << int(e.device)
          << ' ';
        const bool named = e.kind == EventKind::annotation_start || e.kind == EventKind::annotation_end;
        o << (named ? std::string(t.stacks.string(e.name)) : stack(e.stack)) << '\n';
    }
    for (const LiveBlock& b : t.final_blocks)
        o << "block " << b.device << ' ' << b.addr << ' ' << b.size << ' ' << b.stream << ' ' << stack(b.stack) << '\n';
    for (const DeviceInfo& d : t.devices)
        o << "device " << d.device << ' ' << d.baseline_allocated << ' ' << d.baseline_reserved << '\n';
    for (uint64_t s : t.streams) o << "stream " << s << '\n';
    for (const std::string& w : t.warnings) o << "warning " << w << '\n';
    for (const std::string& f : t.faults) o << "fault " << f << '\n';
    return o.str();
}

// What importing gives: the Trace described, or the error.
std::string imported(const std::function<Trace()>& import) {
    try {
        return described(import());
    } catch (const std::exception& e) {
        return std::string("error ") + e.what();
    }
}

// Input handed out as two chunks, cut at `at`.
class TwoChunks : public ChunkSource {
public:
    TwoChunks(std::string_view all, size_t at) : first_(all.substr(0, at)), rest_(all.substr(at)), total_(all.size()) {}
    std::string_view first() const { return first_; }
    bool next(std::string_view& chunk) override {
        if (given_) return false;
        given_ = true;
        chunk = rest_;
        return true;
    }
    uint64_t expected_bytes() const override { return total_; }

private:
    std::string_view first_, rest_;
    uint64_t total_;
    bool given_ = false;
};

// The direct path reads `bytes` as the generic one (the streamed path: Document values the
// importer takes batch by batch) does: whole, in pieces of every size up to `max_piece`, and (if
// `every_cut`) in two pieces cut at every byte. With `whole_too`, so does the whole document.
// (The streamed path reads a batch whose first item is no entry after the others, as the whole
// document does not: crafted traces may differ there, real ones do not.)
void expect_every_path_alike(const std::string& bytes, const std::string& what, size_t max_piece, bool every_cut,
                             bool whole_too = false) {
    const std::string oracle = imported([&] { return import_torch_snapshot(bytes, what, {}, ImportPath::streamed); });
    if (whole_too)
        ASSERT_EQ(imported([&] { return import_torch_snapshot(bytes, what, {}, ImportPath::whole_document); }), oracle) << what;
    ASSERT_EQ(imported([&] { return import_torch_snapshot(bytes, what, {}, ImportPath::direct); }), oracle) << what;
    auto chunked = [&](auto make) {
        return imported([&] { return import_torch_snapshot(make, what, bytes.size(), {}, ImportPath::direct); });
    };
    for (size_t piece = 1; piece <= max_piece; piece = piece < 16 ? piece + 1 : piece * 2)
        ASSERT_EQ(chunked([&] { return std::make_unique<FixedChunks>(bytes, piece); }), oracle) << what << ", pieces of " << piece;
    if (!every_cut) return;
    for (size_t at = 1; at < bytes.size(); ++at) {
        // FixedChunks gives its first piece through first(); TwoChunks the same way.
        struct Cut : ChunkSource {
            Cut(std::string_view all, size_t at) : two(all, at) {}
            bool next(std::string_view& c) override {
                if (!first_given) return first_given = true, c = two.first(), true;
                return two.next(c);
            }
            uint64_t expected_bytes() const override { return two.expected_bytes(); }
            TwoChunks two;
            bool first_given = false;
        };
        ASSERT_EQ(chunked([&] { return std::make_unique<Cut>(bytes, at); }), oracle) << what << ", cut at " << at;
    }
}

// Writes pickles as Python's pickler does, at protocol 2 (BINPUT, no frames) or 4 (MEMOIZE, and
// FRAME hints every `frame_bytes` at an opcode boundary), with strings memoized and met again
// through GETs.
class Writer {
public:
    Writer(int protocol, size_t frame_bytes) : protocol_(protocol), frame_bytes_(frame_bytes) {
        out_ = std::string("\x80", 1) + char(protocol);
    }
    Writer& op(char c) {
        cur_.push_back(c);
        return *this;
    }
    Writer& u8(uint8_t v) { return op(char(v)); }
    Writer& u32(uint32_t v) {
        for (int k = 0; k < 4; ++k) u8(uint8_t(v >> (8 * k)));
        return *this;
    }
    // An opcode ends here: a FRAME may follow.
    Writer& boundary() {
        if (protocol_ >= 4 && cur_.size() >= frame_bytes_) flush_frame();
        return *this;
    }
    Writer& put() {
        if (protocol_ >= 4) op('\x94');
        else if (memo_ < 256) op('q').u8(uint8_t(memo_));
        else op('r').u32(uint32_t(memo_));
        ++memo_;
        return boundary();
    }
    int memo_index() const { return memo_; }  // the next put's
    Writer& get(int index) {
        if (index < 256) op('h').u8(uint8_t(index));
        else op('j').u32(uint32_t(index));
        return boundary();
    }
    // A string: its first time written out and memoized, later a GET (unless `fresh`).
    Writer& str(const std::string& s, bool fresh = false) {
        auto it = strings_.find(s);
        if (it != strings_.end() && !fresh) return get(it->second);
        op('\x8c').u8(uint8_t(s.size()));
        cur_ += s;
        boundary();
        strings_[s] = memo_;
        return put();
    }
    Writer& integer(int64_t v) {
        if (v >= 0 && v < 256) op('K').u8(uint8_t(v));
        else if (v >= 0 && v < 65536) op('M').u8(uint8_t(v)).u8(uint8_t(v >> 8));
        else if (v >= INT32_MIN && v <= INT32_MAX) op('J').u32(uint32_t(v));
        else {
            op('\x8a').u8(9);
            for (int k = 0; k < 8; ++k) u8(uint8_t(uint64_t(v) >> (8 * k)));
            u8(0);
        }
        return boundary();
    }
    Writer& plain(char c) { return op(c).boundary(); }  // an opcode without argument
    std::string stop() {
        op('.');
        flush_frame();
        return out_;
    }

private:
    void flush_frame() {
        if (cur_.empty()) return;
        if (protocol_ >= 4) {
            out_ += '\x95';
            for (int k = 0; k < 8; ++k) out_ += char(uint8_t(uint64_t(cur_.size()) >> (8 * k)));
        }
        out_ += cur_;
        cur_.clear();
    }
    int protocol_;
    size_t frame_bytes_;
    std::string out_, cur_;
    int memo_ = 0;
    std::map<std::string, int> strings_;
};

// A snapshot whose trace entries take every shape `seed` picks among: keys in other orders,
// extra keys, missing keys, frames lists shared, new, empty, of one frame, or with a frame dict
// written out; actions known, unknown and annotations; batches of `batch` entries.
std::string crafted_snapshot(uint32_t seed, int protocol, size_t frame_bytes, int entries, int batch) {
    uint32_t state = seed * 2654435761u + 1;
    auto pick = [&](uint32_t n) {
        state = state * 1664525u + 1013904223u;
        return (state >> 8) % n;
    };
    Writer w(protocol, frame_bytes);
    w.plain('}').put().plain('(');
    w.str("segments").plain(']').put();
    w.str("device_traces").plain(']').put().plain(']').put();
    std::vector<int> frame_dicts, shared_lists;
    auto frame_dict = [&](int line) {
        w.plain('}');
        const int index = w.memo_index();
        w.put().plain('(').str("filename").str("/m/train.py").str("line").integer(line).str("name");
        w.str("f" + std::to_string(line)).plain('u');
        return index;
    };
    int64_t time = 1000;
    for (int e = 0; e < entries; ++e) {
        if (e % batch == 0) w.plain('(');
        static const char* const kActions[] = {"alloc", "free_requested", "free_completed", "segment_alloc",
                                               "segment_free", "mystery", "oom", "annotate"};
        const std::string action = kActions[pick(10) < 6 ? pick(3) : pick(8)];
        time += pick(3);
        std::vector<std::string> keys = {"action", "addr", "size", "stream", "time_us", "compile_context",
                                         "user_metadata", "frames"};
        if (action == "oom") keys.push_back("device_free");
        if (pick(8) == 0) std::rotate(keys.begin(), keys.begin() + long(1 + pick(uint32_t(keys.size() - 1))), keys.end());
        if (pick(10) == 0) keys.erase(keys.begin() + long(pick(uint32_t(keys.size()))));
        if (pick(10) == 0) keys.push_back(pick(2) ? "extra" : "line");
        w.plain('}').put().plain('(');
        for (const std::string& k : keys) {
            w.str(k);
            if (k == "action") w.str(action);
            else if (k == "addr") w.integer(int64_t(0x7f0000000000ull + uint64_t(pick(64)) * 512));
            else if (k == "size") w.integer(pick(20) == 0 ? -512 : int64_t(512) << pick(12));
            else if (k == "stream") w.integer(pick(4) == 0 ? 0x5a5a5a5a5a : 0);
            else if (k == "time_us") w.integer(pick(30) == 0 ? time - 50 : time);
            else if (k == "device_free") w.integer(123456789);
            else if (k == "compile_context") w.str("N/A", true);
            else if (k == "user_metadata") w.str("");
            else if (k == "extra") pick(2) ? w.plain('N') : w.integer(7);
            else if (k == "line") w.integer(3);
            else if (k == "frames") {
                const uint32_t shape = pick(8);
                if (shape == 0 && !shared_lists.empty()) {
                    w.get(shared_lists[pick(uint32_t(shared_lists.size()))]);
                    continue;
                }
                w.plain(']');
                const int list = w.memo_index();
                w.put();
                if (shape == 1) continue;  // empty
                if (frame_dicts.empty() || shape == 2) {
                    w.plain('(');
                    frame_dicts.push_back(frame_dict(int(10 + pick(50))));  // written out: generic
                    w.plain('e');
                } else if (shape == 3) {
                    w.get(frame_dicts[pick(uint32_t(frame_dicts.size()))]).plain('a');
                } else {
                    w.plain('(');
                    for (uint32_t n = 1 + pick(6); n-- > 0;) w.get(frame_dicts[pick(uint32_t(frame_dicts.size()))]);
                    w.plain('e');
                }
                if (pick(3) == 0) shared_lists.push_back(list);
            }
        }
        w.plain('u');
        if (e % batch == batch - 1 || e == entries - 1) w.plain('e');
    }
    w.plain('a').plain('u');
    return w.stop();
}

}  // namespace

TEST(DirectPath, EveryFixtureReadsAsTheWholeDocumentDoes) {
    int fixtures = 0;
    for (const auto& entry : std::filesystem::directory_iterator(VRAMSCOPE_TEST_DATA)) {
        const std::string path = entry.path().string();
        if (path.size() < 10 || path.substr(path.size() - 10) != ".pickle.gz") continue;
        const Bytes file = read_file(path);
        const Bytes plain = gunzip(view(file), path);
        expect_every_path_alike(std::string(view(plain)), path, 4096, false, true);
        ++fixtures;
    }
    EXPECT_GE(fixtures, 19);
}

TEST(DirectPath, CraftedEntriesOfEveryShapeReadAsTheWholeDocumentDoes) {
    for (uint32_t seed = 1; seed <= 12; ++seed)
        for (const int protocol : {2, 4})
            for (const int batch : {3, 1000}) {
                const size_t frame_bytes = 20 + seed * 7;
                const std::string bytes = crafted_snapshot(seed, protocol, frame_bytes, 60, batch);
                expect_every_path_alike(bytes, "seed " + std::to_string(seed) + ", protocol " + std::to_string(protocol) +
                                                   ", batches of " + std::to_string(batch),
                                        64, seed <= 3);
            }
}

TEST(DirectPath, ManyEntriesAcrossManyChunksReadAsTheWholeDocumentDoes) {
    // Enough entries that memo indices pass 255 (LONG_BINGET, LONG_BINPUT) and chunks of 4 KiB
    // to 64 KiB end inside entries, frames and FRAME hints.
    for (const int protocol : {2, 4}) {
        const std::string bytes = crafted_snapshot(99, protocol, 300, 3000, 1000);
        expect_every_path_alike(bytes, "3000 entries, protocol " + std::to_string(protocol), 1 << 16, false);
    }
}

TEST(DirectPath, ATruncatedTraceFailsWithTheGenericPathsErrorWhateverItsChunks) {
    // The bridge between chunks must not move the error or its offset: cut anywhere, every way
    // of reading says what the generic path says.
    const std::string bytes = crafted_snapshot(7, 4, 90, 400, 100);
    for (size_t cut = bytes.size() / 3; cut < bytes.size(); cut += 997) {
        const std::string truncated = bytes.substr(0, cut);
        const std::string error = imported([&] { return import_torch_snapshot(truncated, "cut", {}, ImportPath::streamed); });
        ASSERT_EQ(error.rfind("error cut: offset ", 0), 0u) << error;
        expect_every_path_alike(truncated, "cut", 4096, false);
    }
}
