// Hostile input at the unit level (tests/data/hostile and tests/python/test_hostile.py run it end
// to end): the readers' limits, gzip's checks, .vscope damage, the findings JSON reader and the
// terminal's escaping.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "error_of.h"
#include "analysis/analyze.h"
#include "common/file.h"
#include "common/format.h"
#include "common/gzip_stream.h"
#include "common/read_ahead.h"
#include "findings/json.h"
#include "findings/json_reader.h"
#include "findings/json_writer.h"
#include "importers/pickle.h"
#include "importers/torch_snapshot.h"
#include "events/validate.h"
#include "render/export.h"
#include "trace/reader.h"
#include "trace/writer.h"
#include "trace_builder.h"

using namespace vramscope;
using vramscope::testing::error_of;

namespace {

// `header`: a gzip header with every optional field (extra, name, comment, header CRC), as
// other writers than Python's may put there.
std::string gz(const std::string& plain, bool header = false) {
    uLongf n = compressBound(uLong(plain.size())) + 128;
    std::string out(n, '\0');
    z_stream z{};
    deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    char extra[] = "ex", name[] = "snapshot.pickle", comment[] = "written elsewhere";
    gz_header h{};
    h.extra = reinterpret_cast<Bytef*>(extra), h.extra_len = 2;
    h.name = reinterpret_cast<Bytef*>(name), h.comment = reinterpret_cast<Bytef*>(comment), h.hcrc = 1;
    if (header) deflateSetHeader(&z, &h);
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
    z.avail_in = uInt(plain.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = uInt(out.size());
    deflate(&z, Z_FINISH);
    out.resize(z.total_out);
    deflateEnd(&z);
    return out;
}

const std::string kEmptySnapshot = std::string("\x80\x04}(\x8c\x08segments](e\x8c\x0d" "device_traces](eu.", 37);

}  // namespace

TEST(HostilePickle, AnEmptyBatchInAStreamedListIsNoEntry) {
    // MARK then APPENDS with nothing between, in both lists the importer streams: what
    // `export --memory-viz` writes for empty lists (it once read the first item of none).
    const Trace t = load_bytes(kEmptySnapshot, "empty.pickle");
    EXPECT_TRUE(t.events.empty());
    EXPECT_TRUE(t.faults.empty());
}

TEST(HostilePickle, LimitsNameTheOffsetAndTheLimit) {
    ReadLimits small;
    small.max_depth = 8;
    small.max_string_bytes = 16;
    small.max_held_bytes = 1 << 20;
    const std::string deep = std::string("\x80\x04", 2) + std::string(9, '(') + ".";
    EXPECT_NE(error_of([&] { pickle::parse(deep, "deep.pickle", nullptr, small); })
                  .find("deep.pickle: offset 10: more than 8 containers open at once"), std::string::npos);
    const std::string longer = std::string("\x80\x04\x8c\x11", 4) + std::string(17, 'a') + ".";
    EXPECT_NE(error_of([&] { pickle::parse(longer, "s.pickle", nullptr, small); }).find("offset 2: a string of 17 bytes; the limit is 16"),
              std::string::npos);
    std::string dicts = std::string("\x80\x04]", 3);
    for (int k = 0; k < 200; ++k) dicts += "(" + std::string(1000, '}') + "e";
    const std::string held = error_of([&] { pickle::parse(dicts + ".", "bomb.pickle", nullptr, small); });
    EXPECT_NE(held.find("more than 1 MiB held at once"), std::string::npos) << held;
    EXPECT_NE(held.find("--max-memory"), std::string::npos);
    const std::string sparse = std::string("\x80\x04Nr\x00\x00\x00\x10.", 9);
    EXPECT_NE(error_of([&] { pickle::parse(sparse, "memo.pickle"); }).find("memo index 268435456 far past"), std::string::npos);
}

TEST(HostilePickle, NothingMayFollowTheStop) {
    EXPECT_NE(error_of([&] { pickle::parse(std::string("\x80\x04N.x", 5), "t.pickle"); }).find("offset 4: data follows the pickle's STOP"),
              std::string::npos);
    const std::string input = std::string("\x80\x04N.", 4) + "tail";
    FixedChunks pieces(input, 4);  // the rest in a later chunk
    const std::string_view first = pieces.first();
    EXPECT_NE(error_of([&] { pickle::parse(first, pieces, "t.pickle"); }).find("data follows"), std::string::npos);
}

TEST(HostileGzip, CrcLengthAndTrailingBytesAreChecked) {
    const std::string whole = gz(kEmptySnapshot);
    EXPECT_NO_THROW(load_bytes(whole, "ok.pickle.gz"));
    for (size_t back : {8u, 1u}) {  // the CRC-32, the length
        std::string bad = whole;
        bad[bad.size() - back] ^= 1;
        EXPECT_NE(error_of([&] { load_bytes(bad, "bad.pickle.gz"); }).find("bad.pickle.gz: offset"), std::string::npos) << back;
    }
    EXPECT_NE(error_of([&] { load_bytes(whole + "garbage", "t.pickle.gz"); }), "");
    EXPECT_NE(error_of([&] { load_bytes(whole + gz("more"), "two.pickle.gz"); }).find("data follows"), std::string::npos);
}

// Every inflater this build has reads the same bytes and refuses the same damage: ISA-L's, the
// fastest, must not accept what zlib's refuses.
TEST(HostileGzip, EveryInflaterReadsTheSameAndRefusesTheSameDamage) {
    // Several ring blocks (1 MiB), compressible but not trivial, ending inside a block, so that
    // a second member starts in the middle of one.
    std::string plain((5 << 19) + 12345, '\0');
    for (size_t i = 0; i < plain.size(); ++i) plain[i] = char("snapshot"[i % 8] + (i * 2654435761u >> 29));
    const std::string one = gz(plain), two = one + gz("second member");
    auto read = [](const std::string& input, Inflater inflater) {
        GzipStream stream(input, "t.gz", UINT64_MAX, inflater);
        std::string out;
        std::string_view chunk;
        while (stream.next(chunk)) out += chunk;
        return out;
    };
    auto refused = [&](const std::string& input, Inflater inflater) {
        return error_of([&] { read(input, inflater); });
    };
    for (const Inflater inflater : {Inflater::zlib, Inflater::isal}) {
        if (!built_with(inflater)) continue;
        SCOPED_TRACE(inflater == Inflater::isal ? "isal" : "zlib");
        EXPECT_TRUE(read(one, inflater) == plain);
        EXPECT_TRUE(read(two, inflater) == plain + "second member");
        EXPECT_EQ(read(gz("every header field", true), inflater), "every header field");
        std::string renamed = gz("every header field", true);
        renamed[14] ^= 1;  // the name's first byte (after 10 fixed bytes and 4 of extra): its CRC fails
        EXPECT_NE(refused(renamed, inflater), "");
        EXPECT_EQ(read(gz(""), inflater), "");
        for (size_t back : {8u, 1u}) {  // the CRC-32, the length
            std::string bad = one;
            bad[bad.size() - back] ^= 1;
            EXPECT_NE(refused(bad, inflater).find("t.gz: offset "), std::string::npos) << back;
        }
        std::string flipped = one;
        flipped[one.size() / 2] ^= 0x10;
        EXPECT_NE(refused(flipped, inflater), "");
        EXPECT_NE(refused(one.substr(0, one.size() / 2), inflater).find("cut short"), std::string::npos);
        EXPECT_NE(refused(one.substr(0, one.size() - 3), inflater), "");
        EXPECT_NE(refused(one + "garbage", inflater), "");
        // Bytes after a member that are too few for a gzip header: refused, and nothing but the
        // member's own bytes read before the error.
        const std::string with_trailing = one + "garbage!";
        GzipStream trailing(with_trailing, "t.gz", UINT64_MAX, inflater);
        std::string before_error;
        const std::string why = error_of([&] {
            std::string_view chunk;
            while (trailing.next(chunk)) before_error += chunk;
        });
        EXPECT_NE(why, "");
        EXPECT_EQ(why.find("cut short"), std::string::npos) << "junk after a member is no member cut short: " << why;
        EXPECT_TRUE(before_error == plain) << before_error.size() << " bytes read, not " << plain.size();
        EXPECT_NE(refused("\x1f\x8b\x09garbage and more garbage", inflater), "");
    }
    if (!built_with(Inflater::isal)) EXPECT_EQ(fastest_inflater(), Inflater::zlib);
}

TEST(HostileGzip, ContentIsToldByItsFirstBytesAndInflationIsBounded) {
    const std::string zeros = gz(std::string(8 << 20, '\0'));
    EXPECT_NE(error_of([&] { load_bytes(zeros, "zeros.gz"); }).find("zeros.gz: offset 0: gzip data whose content is neither"),
              std::string::npos);
    ReadLimits small;
    small.max_decoded_bytes = 1 << 20;
    // A 4 MiB string: under the string limit, over the inflation limit.
    const std::string big = gz(std::string("\x80\x04\x8d\x00\x00\x40\x00\x00\x00\x00\x00", 11) + std::string(4 << 20, 'a') + ".");
    const std::string why = error_of([&] { load_bytes(big, "big.pickle.gz", small); });
    EXPECT_NE(why.find("inflates to more than 1048576 bytes"), std::string::npos) << why;
}

TEST(HostileFile, ReadAheadGivesTheWholeFileAndStopsWhenLeftEarly) {
    const std::string path = ::testing::TempDir() + "/read_ahead_" + std::to_string(::getpid()) + ".bin";
    std::string content((7 << 20) / 2, '\0');  // 3.5 MiB: blocks of 1 MiB, the last one short
    for (size_t i = 0; i < content.size(); ++i) content[i] = char(i * 2654435761u >> 24);
    write_file(path, content, "test input");
    {
        ReadAheadFile file(path);
        EXPECT_EQ(file.expected_bytes(), content.size());
        std::string read;
        std::string_view chunk;
        while (file.next(chunk)) read += chunk;
        EXPECT_TRUE(read == content);
        EXPECT_FALSE(file.next(chunk)) << "the end stays the end";
    }
    {
        ReadAheadFile early(path);  // one block read, then left: the reading thread must stop
        std::string_view chunk;
        ASSERT_TRUE(early.next(chunk));
    }
    EXPECT_NE(error_of([&] { ReadAheadFile small(path, 1 << 20); }).find("1048576"), std::string::npos);
    std::remove(path.c_str());
}

// A gzip'd file is read in pieces as it is inflated (a window of 4 MiB, topped up as the decoder
// goes): what it reads, and every error with its offset, must be what the whole file in memory
// gives, at a cut or a flipped bit anywhere, before, across or after a top-up.
TEST(HostileGzip, AFileReadInPiecesReadsAndFailsAsTheWholeFileInMemory) {
    std::string plain(8 << 20, '\0');  // 3 parts in 4 incompressible: 6 MiB compressed, two top-ups
    uint64_t x = 88172645463325252u;
    for (size_t i = 0; i < plain.size(); ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        plain[i] = (i >> 18) % 4 == 3 ? "snapshot"[i % 8] : char(x);
    }
    const std::string one = gz(plain);
    ASSERT_GT(one.size(), 6u << 20);
    std::vector<std::string> inputs = {one, one + gz("second member"), one + "garbage!", one + "garbage and more garbage"};
    for (size_t cut : {size_t(10), size_t(4 << 20) - 1, size_t(4 << 20), size_t(4 << 20) + 1, one.size() / 2, one.size() - 3, one.size() - 9})
        inputs.push_back(one.substr(0, cut));
    for (size_t at : {size_t(100), size_t(5 << 19), size_t(4 << 20) - 2, size_t(4 << 20) + 2, size_t(6 << 20), one.size() - 8, one.size() - 1}) {
        inputs.push_back(one);
        inputs.back()[at] ^= 0x10;
    }
    const std::string path = ::testing::TempDir() + "/pieces_" + std::to_string(::getpid()) + ".gz";
    auto read = [](GzipStream& stream, std::string& why) {
        std::string out;
        why = error_of([&] {
            std::string_view chunk;
            while (stream.next(chunk)) out += chunk;
        });
        return out;
    };
    for (const Inflater inflater : {Inflater::zlib, Inflater::isal}) {
        if (!built_with(inflater)) continue;
        SCOPED_TRACE(inflater == Inflater::isal ? "isal" : "zlib");
        for (size_t k = 0; k < inputs.size(); ++k) {
            write_file(path, inputs[k], "test input");
            GzipStream memory(inputs[k], path, UINT64_MAX, inflater);
            GzipStream file(std::make_unique<FileChunks>(path, UINT64_MAX, 0), path, UINT64_MAX, inflater);
            EXPECT_EQ(file.expected_bytes(), memory.expected_bytes()) << k;
            std::string why_memory, why_file;
            EXPECT_TRUE(read(file, why_file) == read(memory, why_memory)) << k;
            EXPECT_EQ(why_file, why_memory) << k;
            EXPECT_EQ(why_memory.empty(), k < 2) << k << ": " << why_memory;
        }
    }
    // End to end: the file through load_any, the same bytes through load_bytes.
    const std::string small = gz(kEmptySnapshot);
    std::vector<std::string> damaged = {small + "garbage", small + gz("more"), small.substr(0, small.size() / 2), gz("not a pickle")};
    for (size_t back : {8u, 1u}) {
        damaged.push_back(small);
        damaged.back()[small.size() - back] ^= 1;
    }
    for (const std::string& bytes : damaged) {
        write_file(path, bytes, "test input");
        const std::string why = error_of([&] { load_bytes(bytes, path); });
        EXPECT_NE(why, "");
        EXPECT_EQ(error_of([&] { load_any(path); }), why);
    }
    std::remove(path.c_str());
}

namespace {
std::string written(int steps, size_t chunk_bytes) {
    vramscope::testing::TraceBuilder b;
    const uint32_t site = b.stack({{"train.py", 10, "step"}});
    for (int s = 0; s < steps; ++s) {
        b.alloc(0x100000 + 0x1000 * uint64_t(s), 512, site);
        b.step();
    }
    const std::string path = ::testing::TempDir() + "/hostile_" + std::to_string(::getpid()) + ".vscope";
    write_trace(b.t, path, chunk_bytes);
    const Bytes bytes = read_file(path);
    std::remove(path.c_str());
    return std::string(bytes.begin(), bytes.end());
}
std::vector<std::string> chunks_of(const std::string& file) {
    std::vector<std::string> out;
    for (size_t off = 12; off + 12 <= file.size();) {
        uint32_t len;
        std::memcpy(&len, file.data() + off + 4, 4);
        out.push_back(file.substr(off, 12 + len));
        off += 12 + len;
    }
    return out;
}
}  // namespace

TEST(HostileVscope, RepeatedSwappedOrMissingChunksAreFaults) {
    const std::string file = written(200, 64);
    const std::vector<std::string> c = chunks_of(file);
    ASSERT_GE(c.size(), 4u);
    const std::string header = file.substr(0, 12);
    const Trace whole = parse_trace(file, "whole.vscope");
    EXPECT_TRUE(whole.faults.empty());
    EXPECT_TRUE(whole.warnings.empty());
    const std::pair<std::string, const char*> damaged[] = {
        {header + c[0] + c[1] + c[1] + c[2], "chunk 1 again, where chunk 2 belongs"},
        {header + c[0] + c[2] + c[1], "chunk 2 where chunk 1 belongs"},
        {header + c[0] + c[2], "chunk 2 where chunk 1 belongs"},
        {file + c[0], "data after the end record"},
    };
    for (const auto& [bytes, why] : damaged) {
        const Trace t = parse_trace(bytes, "d.vscope");
        ASSERT_EQ(t.faults.size(), 1u) << why;
        EXPECT_NE(t.faults[0].find(why), std::string::npos) << t.faults[0];
        EXPECT_NE(t.faults[0].find("d.vscope: offset "), std::string::npos);
    }
}

TEST(HostileVscope, AChunkThatFailsToDecodeHalfWayLeavesNoTraceInTheAnalysis) {
    // Chunks of thousands of events, the second's last record cut short (its checksum made to
    // match): the analysis took some of that chunk's events before it failed, and must count,
    // check and replay none of them, as a trace read whole keeps none.
    const std::string file = written(20000, 1 << 16);
    const std::vector<std::string> c = chunks_of(file);
    ASSERT_GE(c.size(), 3u);
    const std::string payload = c[1].substr(12) + char(22);  // a chunk time without its time
    std::string damaged = file.substr(0, 12) + c[0] + "VSCK";
    for (uint32_t v : {uint32_t(payload.size()), uint32_t(crc32(0, reinterpret_cast<const Bytef*>(payload.data()), uInt(payload.size())))})
        for (int i = 0; i < 4; ++i) damaged.push_back(char(v >> (8 * i)));
    damaged += payload + c[2];
    const std::string path = ::testing::TempDir() + "/half_chunk_" + std::to_string(::getpid()) + ".vscope";
    write_file(path, damaged, "test trace");
    const Trace whole = read_trace(path);
    ASSERT_EQ(whole.faults.size(), 1u);
    EXPECT_NE(whole.faults[0].find("record cut short"), std::string::npos) << whole.faults[0];
    ASSERT_GT(whole.events.size(), 1024u);
    const Findings streamed = analyze_file(path, AnalysisOptions{}), held = analyze(whole, AnalysisOptions{});
    std::remove(path.c_str());
    EXPECT_EQ(streamed.input_faults, held.input_faults);
    EXPECT_EQ(streamed.event_count, held.event_count);
    EXPECT_EQ(streamed.event_count, whole.entry_count());
}

namespace {

// A folder of its own under the test's temporary directory, empty.
std::filesystem::path fresh_dir(const std::string& name) {
    const auto dir = std::filesystem::path(::testing::TempDir()) / (name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

std::string contents(const std::filesystem::path& path) {
    const Bytes b = read_file(path.string());
    return std::string(b.data(), b.size());
}

}  // namespace

TEST(HostileWrite, AFileIsReplacedWholeOrNotAtAll) {
    const auto dir = fresh_dir("replace");
    const std::string out = (dir / "out.json").string();
    write_file(out, "earlier", "test output");
    ::chmod(out.c_str(), 0640);
    // A writer that fails half way (a full disk, a trace that cannot be written): the target keeps
    // what it had, the error names it and not the temporary file, and nothing is left beside it.
    const std::string why = error_of([&] {
        replace_file(out, "test output", [&](const std::string& temporary) {
            write_file(temporary, "half", "test output");
            throw std::runtime_error(temporary + ": write failed: No space left on device");
        });
    });
    EXPECT_EQ(why, out + ": write failed: No space left on device");
    EXPECT_EQ(contents(out), "earlier");
    write_file(out, "later", "test output");
    EXPECT_EQ(contents(out), "later");
    struct stat st {};
    ASSERT_EQ(::stat(out.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0640u) << "a replaced file keeps its mode";
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1) << "no temporary file is left";
}

TEST(HostileWrite, WhatCannotBeReplacedIsWrittenInPlaceOrRefused) {
    write_file("/dev/null", "a device is written, never replaced", "test output");
    const auto dir = fresh_dir("replace_dir");
    EXPECT_NE(error_of([&] { write_file(dir.string(), "x", "test output"); }).find(": cannot write the test output: Is a directory"),
              std::string::npos);
    EXPECT_NE(error_of([&] { write_file((dir / "missing" / "out").string(), "x", "test output"); })
                  .find("missing/out: cannot write the test output: No such file"),
              std::string::npos);
    EXPECT_NE(error_of([&] { write_file("", "x", "test output"); }).find("No such file"), std::string::npos);
    // A name at the filesystem's limit still gets a temporary file beside it.
    const std::string longest = (dir / std::string(255, 'n')).string();
    write_file(longest, "x", "test output");
    EXPECT_EQ(contents(longest), "x");
}

TEST(HostileWrite, SameFileSeesLinksDotsAndInodes) {
    const auto dir = fresh_dir("same_file");
    const std::string a = (dir / "a").string();
    write_file(a, "x", "test output");
    std::filesystem::create_hard_link(a, dir / "hard");
    std::filesystem::create_symlink(a, dir / "soft");
    std::filesystem::create_directories(dir / "sub");
    EXPECT_TRUE(same_file(a, (dir / "hard").string()));
    EXPECT_TRUE(same_file(a, (dir / "soft").string()));
    EXPECT_TRUE(same_file(a, (dir / "sub" / ".." / "a").string()));
    EXPECT_TRUE(same_file((dir / "new").string(), (dir / "sub" / ".." / "new").string())) << "outputs not made yet";
    EXPECT_FALSE(same_file(a, (dir / "new").string()));
}

TEST(HostileFormat, ASizePast2To64BytesIsNoSize) {
    uint64_t bytes = 7;
    EXPECT_FALSE(parse_bytes("99999999999999999999999 TB", bytes));
    EXPECT_FALSE(parse_bytes("16777216 TiB", bytes));  // 2^64 exactly
    EXPECT_FALSE(parse_bytes("inf", bytes));
    EXPECT_FALSE(parse_bytes("nan GiB", bytes));
    EXPECT_FALSE(parse_bytes("1e999", bytes));
    EXPECT_EQ(bytes, 7u) << "a refused size leaves the value as it was";
    ASSERT_TRUE(parse_bytes("16777215 TiB", bytes));
    EXPECT_EQ(bytes, 16777215ull << 40);
}

TEST(HostileVscope, VersionOneStillReadsWithANote) {
    // Version 1 is version 2 without the chunk numbers and the end chunk.
    const std::string file = written(20, 1 << 16);
    std::vector<std::string> c = chunks_of(file);
    std::string v1 = file.substr(0, 12);
    v1[8] = 1;
    for (size_t k = 0; k + 1 < c.size(); ++k) {
        const std::string payload = c[k].substr(12 + 2);  // tag 24 and a one-byte number
        std::string head = "VSCK";
        for (uint32_t v : {uint32_t(payload.size()), uint32_t(crc32(0, reinterpret_cast<const Bytef*>(payload.data()), uInt(payload.size())))})
            for (int i = 0; i < 4; ++i) head.push_back(char(v >> (8 * i)));
        v1 += head + payload;
    }
    const Trace t = parse_trace(v1, "old.vscope");
    EXPECT_EQ(t.events.size(), parse_trace(file, "new.vscope").events.size());
    EXPECT_TRUE(t.faults.empty());
    ASSERT_EQ(t.warnings.size(), 1u);
    EXPECT_NE(t.warnings[0].find("version 1"), std::string::npos);
}

TEST(HostileJson, ShapesDepthAndOffsets) {
    EXPECT_NE(error_of([] { parse_json(std::string(100000, '['), "deep.json", 0); }).find("deep.json: offset 65: nested deeper than 64"),
              std::string::npos);
    EXPECT_NE(error_of([] { report_data_from_findings({"[]"}, {"a.json"}); }).find("its root is an array"), std::string::npos);
    EXPECT_NE(error_of([] { report_data_from_findings({"{\"runs\": null}"}, {"a.json"}); }).find("\"runs\" is null"),
              std::string::npos);
    EXPECT_NE(error_of([] { report_data_from_findings({"{\"runs\": [1]}"}, {"a.json"}); }).find("a run is a number"),
              std::string::npos);
    EXPECT_NE(error_of([] { parse_json("{\"a\": 1} x", "t.json", 0); }).find("offset 9: data after"), std::string::npos);
    const std::string data = report_data_from_findings({"{\"verdict\":\"leak\",\"source\":\"<!--\"}"}, {"a.json"});
    EXPECT_NE(data.find("\"source\":\"<!--\""), std::string::npos) << data;  // report_page escapes it (Report test)
    EXPECT_EQ(parse_json("{\"k\":\"a\\u00e9\\n\"}", "t.json", 1).get("k")->str, "a\xc3\xa9\n");
}

TEST(HostileTerminal, ControlCharactersBecomeVisibleEscapes) {
    EXPECT_EQ(terminal_safe(std::string("a\x1b[2Jb\r\nc\0d\x7f" "\xc2\x9b" "e", 15)), "a\\x1b[2Jb\\x0d\\x0ac\\x00d\\x7f\\u009be");
    EXPECT_EQ(terminal_safe("x\ny", true), "x\ny");
    EXPECT_EQ(terminal_safe("caf\xc3\xa9 \xe2\x80\xa8"), "caf\xc3\xa9 \xe2\x80\xa8");  // other UTF-8 as it is
    EXPECT_EQ(terminal_safe("a\xff\xed\xb3\xbf\xe2\x80"), "a\\xff\\xed\\xb3\\xbf\\xe2\\x80");  // not UTF-8: a surrogate, a cut
}

TEST(HostileJson, WrittenJsonIsValidUtf8WhateverTheNames) {
    Json j;
    j.value("ok \xc3\xa9 \xff lone \xed\xb3\xbf \xf4\x90\x80\x80 \x01");
    EXPECT_EQ(j.out, "\"ok \xc3\xa9 \\ufffd lone \\ufffd\\ufffd\\ufffd \\ufffd\\ufffd\\ufffd\\ufffd \\u0001\"");
}

TEST(HostileVscope, AStackDeeperThanAnyWriterKeepsIsAFault) {
    vramscope::testing::TraceBuilder b;
    uint32_t node = 0;
    for (uint32_t k = 0; k < 20; ++k)
        node = b.t.stacks.intern_stack(node, b.t.stacks.intern_frame(Frame{b.t.stacks.intern_string("deep.py"), 0, k}));
    b.alloc(0x100000, 512, node);
    const std::string path = ::testing::TempDir() + "/deep.vscope";
    write_trace(b.t, path);
    ReadLimits limits;
    limits.max_stack_frames = 10;
    const Trace t = read_trace(path, limits);
    std::remove(path.c_str());
    ASSERT_EQ(t.faults.size(), 1u);
    EXPECT_NE(t.faults[0].find("a stack deeper than 10 frames"), std::string::npos) << t.faults[0];
}

// Inputs that amplify: what they decode to is held to the limits (tests/data/hostile
// holds them end to end).
const std::string kHostile = std::string(VRAMSCOPE_TEST_DATA) + "/hostile/";

TEST(HostileAmplification, FrontCodedStringsAreHeldToTheLimits) {
    ReadLimits limits;
    limits.max_held_bytes = 64 << 20;
    const std::string path = kHostile + "strings_front_coded.vscope";
    std::string why = error_of([&] { read_trace(path, limits); });
    EXPECT_NE(why.find(path + ": offset "), std::string::npos) << why;
    EXPECT_NE(why.find("more than 64 MiB (the limit; --max-memory raises it)"), std::string::npos) << why;
    limits.max_string_bytes = 1000;
    why = error_of([&] { read_trace(path, limits); });
    EXPECT_NE(why.find("a string of 1001 bytes, over the 0 MiB limit (--max-string raises it)"), std::string::npos) << why;
}

TEST(HostileAmplification, TimelinesOfManyDevicesOverManyStepsAreHeldToTheLimit) {
    vramscope::testing::TraceBuilder b;
    for (uint16_t d = 1; d < 256; ++d) b.t.device(d);
    b.alloc(0x100000, 512, b.stack({{"train.py", 1, "step"}}));
    for (int k = 0; k < 2000; ++k) b.step();
    EXPECT_EQ(analyze(b.t).step_count, 2000u);  // 256 x 2000 points: 29 MB
    b.t.limits.max_held_bytes = 16 << 20;
    const std::string why = error_of([&] { analyze(b.t); });
    EXPECT_NE(why.find("synthetic: 256 devices over "), std::string::npos) << why;
    EXPECT_NE(why.find("more than 16 MiB (the limit; --max-memory raises it)"), std::string::npos) << why;
}

// The figure a refusal names is true: what was taken when it came is under the limit, each
// growing vector at its growth charge (common/limits.h).
TEST(HostileAmplification, ASnapshotOfManyDevicesOverManyStepsIsRefusedBeforeItsTimelinesPassTheLimit) {
    ReadLimits limits;
    limits.max_held_bytes = 64 << 20;
    const std::string path = kHostile + "devices_times_steps.pickle.gz";
    const Trace t = load_any(path, limits);
    const std::string why = error_of([&] { analyze(t); });
    EXPECT_NE(why.find(path + ": 256 devices over "), std::string::npos) << why;
    EXPECT_NE(why.find("more than 64 MiB (the limit; --max-memory raises it)"), std::string::npos) << why;
    const uint64_t steps = std::stoull(why.substr(why.find(" over ") + 6));
    EXPECT_LE(kGrowthCharge * 256 * steps * sizeof(StepPoint), limits.max_held_bytes) << why;
    EXPECT_GE(kGrowthCharge * 256 * (steps + 2) * sizeof(StepPoint), limits.max_held_bytes / 2) << "refused near the limit";
}

TEST(HostileAmplification, TheFindingsJsonOfManyDevicesOverManyStepsIsHeldToTheLimit) {
    vramscope::testing::TraceBuilder b;
    for (uint16_t d = 1; d < 256; ++d) b.t.device(d);
    b.alloc(0x100000, 512, b.stack({{"train.py", 1, "step"}}));
    for (int k = 0; k < 2000; ++k) b.step();
    const Findings f = analyze(b.t);
    const std::string json = to_json(f, 1 << 30);
    EXPECT_GT(json.size(), size_t(32) << 20);  // 512,000 points of about 150 bytes
    const std::string why = error_of([&] { to_json(f, 64 << 20); });
    EXPECT_NE(why.find("synthetic: its findings JSON, 256 devices over 2000 steps, would hold more than 64 MiB "
                       "(the limit; --max-memory raises it)"),
              std::string::npos) << why;
}

TEST(HostileAmplification, PerfettoSamplesADeviceAtAStepEndOnlyWhenItChanged) {
    vramscope::testing::TraceBuilder b;
    for (uint16_t d = 1; d < 256; ++d) b.t.device(d);
    const uint32_t stack = b.stack({{"train.py", 1, "step"}});
    for (int k = 0; k < 1000; ++k) {
        b.alloc(0x100000, 512, stack);
        b.free(0x100000, 512);
        b.step();
    }
    const std::string json = to_perfetto_json(b.t, analyze(b.t));
    const auto count = [&](const std::string& what) {
        size_t n = 0;
        for (size_t at = 0; (at = json.find(what, at)) != std::string::npos; ++at) ++n;
        return n;
    };
    const size_t counters = count(" memory\",");
    EXPECT_GE(counters, 1000u);        // device 0 changes in every step
    EXPECT_LE(counters, 2000u + 256);  // at most a sample per block event, and one per device
    EXPECT_LE(count(" by category\","), counters);  // drawn with a device's memory, on the devices that allocate
    b.t.limits.max_held_bytes = 64 << 10;
    const std::string why = error_of([&] { to_perfetto_json(b.t, Findings{}); });
    EXPECT_NE(why.find("synthetic: its Perfetto trace would be more than 0 MiB"), std::string::npos) << why;
}

TEST(HostileDevices, NumbersPast255AndCapacitiesBelowTheTracesOwnBytesAreFaults) {
    const Trace cut = read_trace(kHostile + "device_256.vscope");
    ASSERT_EQ(cut.faults.size(), 1u);
    EXPECT_NE(cut.faults[0].find("device number out of range"), std::string::npos) << cut.faults[0];
    const Trace aliased = load_any(kHostile + "device_65536.pickle");
    ASSERT_EQ(aliased.faults.size(), 1u);
    EXPECT_NE(aliased.faults[0].find("1 segments on a device number outside 0 to 255"), std::string::npos) << aliased.faults[0];
    vramscope::testing::TraceBuilder b;
    b.t.device(0).total_memory = 1024;
    b.alloc(0x100000, 512, 0);
    validate_events(b.t);
    EXPECT_TRUE(b.t.faults.empty());
    b.alloc(0x200000, 1024, 0);
    validate_events(b.t);
    ASSERT_EQ(b.t.faults.size(), 1u);
    EXPECT_NE(b.t.faults[0].find("1 devices with a capacity below the bytes the trace itself has live on them"),
              std::string::npos) << b.t.faults[0];
}

// A findings file of a million zeros is 2 MB of text but a hundred MB of values kept: reading it
// honours --max-memory like every other reader, at the offset where the bound was passed.
TEST(HostileJson, WhatAFindingsFileKeepsIsBoundedByMaxMemory) {
    std::string text = "{\"verdict\":\"leak\",\"notes\":[0";
    for (int i = 0; i < 1000000; ++i) text += ",0";
    text += "]}";
    ReadLimits limits;
    limits.max_held_bytes = 16 << 20;
    try {
        read_findings(text, "zeros.json", limits);
        FAIL() << "a million values kept under 16 MiB";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("--max-memory"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("zeros.json: offset"), std::string::npos) << e.what();
    }
    limits.max_held_bytes = uint64_t(1) << 30;  // under a bound it fits: read, and refused for what it says
    EXPECT_THROW(read_findings(text, "zeros.json", limits), std::runtime_error);
}

// A capacity given below what the trace already allocated moves the OOM projection to the step in
// hand: said as a warning, never silently.
TEST(HostileDevice, DeviceMemoryBelowThePeakIsSaid) {
    AnalysisOptions opt;
    opt.device_memory = 1 << 20;
    const Findings f = analyze_file(std::string(VRAMSCOPE_TEST_DATA) + "/leak_ctx_losses.pickle.gz", opt);
    ASSERT_FALSE(f.warnings.empty());
    EXPECT_NE(f.warnings.back().find("below the"), std::string::npos) << f.warnings.back();
    opt.device_memory = uint64_t(80) << 30;
    EXPECT_TRUE(analyze_file(std::string(VRAMSCOPE_TEST_DATA) + "/leak_ctx_losses.pickle.gz", opt).warnings.empty());
}
