#include <gtest/gtest.h>

#include <string>

#include "common/gzip_stream.h"
#include "importers/pickle.h"
#include "importers/torch_snapshot.h"

using namespace vramscope;

namespace {

// Assembles pickle opcodes by hand, as Python's pickle.dumps(protocol=4) would emit them.
struct P {
    std::string b = std::string("\x80\x04", 2);
    P& op(char c) { b.push_back(c); return *this; }
    P& u8(uint8_t v) { b.push_back(char(v)); return *this; }
    P& str(const std::string& s) { op('\x8c').u8(uint8_t(s.size())); b += s; return *this; }
    P& i1(uint8_t v) { return op('K').u8(v); }
    P& i4(int32_t v) { op('J'); for (int k = 0; k < 4; ++k) u8(uint8_t(uint32_t(v) >> (8 * k))); return *this; }
    P& long1(uint64_t v) {  // 9 bytes so the top bit never reads as a sign
        op('\x8a').u8(9);
        for (int k = 0; k < 8; ++k) u8(uint8_t(v >> (8 * k)));
        return u8(0);
    }
    P& memo() { return op('\x94'); }
    P& get(uint8_t i) { return op('h').u8(i); }
    P& mark() { return op('('); }
    std::string stop() { return b + "."; }
};

std::string entry(const char* action, uint64_t addr, int32_t size, int frames_ref = -1) {
    P p;
    p.b.clear();
    p.op('}').mark().str("action").str(action).str("addr").long1(addr).str("size").i4(size).str("stream").i1(0)
        .str("time_us").i4(100).str("frames");
    if (frames_ref >= 0) p.get(uint8_t(frames_ref));
    else p.op(']');
    p.op('u');
    return p.b;
}

}  // namespace

namespace {
// LONG1 at every width Python writes, and wider: n little-endian two's-complement bytes. Calls
// check(value, n, fits, bytes of the opcode) for each value that n bytes can hold.
template <class F> void for_each_long(F&& check) {
    const __int128 two64 = __int128(1) << 64;
    const std::pair<__int128, bool> cases[] = {  // the value, and whether it fits 64 bits (values
        // in [2^63, 2^64) keep their bits, as addresses)
        {0, true}, {1, true}, {-1, true}, {127, true}, {128, true}, {-128, true}, {-129, true},
        {0x7f12345678, true}, {0x7f1234567800, true}, {-0x7f1234567800, true},
        {0x1700000000000000, true}, {INT64_MAX, true}, {INT64_MIN, true},
        {__int128(1) << 63, true}, {two64 - 1, true}, {two64, false}, {-two64, false}};
    for (const auto& [value, fits] : cases) {
        for (int n = 0; n <= 12; ++n) {
            // The value must survive n bytes: shifting them back out gives what went in.
            const __int128 lo = n == 0 ? 0 : -(__int128(1) << (8 * n - 1)), hi = n == 0 ? 0 : (__int128(1) << (8 * n - 1)) - 1;
            if (n < 16 && (value < lo || value > hi)) continue;
            std::string op = {'\x8a', char(n)};
            for (int k = 0; k < n; ++k) op.push_back(char(uint8_t(uint64_t(value >> (8 * k)))));
            check(value, n, fits, op);
        }
    }
}
}  // namespace

TEST(Pickle, ReadsLongsOfEveryWidth) {
    for_each_long([](__int128 value, int n, bool fits, const std::string& op) {
        P p;
        p.op('}').str("v");
        p.b += op;
        p.op('s');
        const std::string bytes = p.stop();
        pickle::Document d = pickle::parse(bytes, "t.pickle");
        const std::optional<pickle::Value> v = d.get(d.root(), "v");
        ASSERT_TRUE(v) << n;
        const std::string what = "value " + std::to_string(int64_t(value)) + " in " + std::to_string(n) + " bytes";
        if (fits) {
            EXPECT_NE(v->type, pickle::Type::big_integer) << what;
            EXPECT_EQ(uint64_t(v->i), uint64_t(value)) << what;
        } else {
            EXPECT_EQ(v->type, pickle::Type::big_integer) << what;
        }
    });
}

TEST(Pickle, ReadsDataOpcodes) {
    P p;
    p.op('}').memo().mark().str("a").i1(7).str("big").long1(0x7f1234567800ull).str("neg").i4(-5)
        .str("f").op('G');
    const uint8_t half[8] = {0x3f, 0xe0, 0, 0, 0, 0, 0, 0};  // 0.5, big-endian
    for (uint8_t c : half) p.u8(c);
    p.str("list").op(']').memo().mark().i1(1).i1(2).i1(3).op('e').str("t").i1(1).i1(2).op('\x86')
        .str("none").op('N').str("yes").op('\x88').op('u');
    const std::string bytes = p.stop();
    pickle::Document d = pickle::parse(bytes, "t.pickle");
    const pickle::Ref root = d.root();
    EXPECT_EQ(d.get(root, "a")->i, 7);
    EXPECT_EQ(uint64_t(d.get(root, "big")->i), 0x7f1234567800ull);
    EXPECT_EQ(d.get(root, "neg")->i, -5);
    EXPECT_DOUBLE_EQ(d.get(root, "f")->f, 0.5);
    pickle::Ref list;
    ASSERT_TRUE(d.get(root, "list", &list));
    EXPECT_EQ(d[list].len, 3u);
    int sum = 0;
    d.for_each_item(list, [&](pickle::Ref r) { sum += int(d[r].i); });
    EXPECT_EQ(sum, 6);
    EXPECT_EQ(d.get(root, "t")->type, pickle::Type::tuple);
    EXPECT_EQ(d.get(root, "none")->type, pickle::Type::none);
    EXPECT_EQ(d.get(root, "yes")->i, 1);
    EXPECT_FALSE(d.get(root, "missing"));
}

TEST(Pickle, ChunkBoundariesAnywhereGiveTheSameDocument) {
    P p;
    p.op('}').memo().mark().str("a_long_key_name").op('X');
    const std::string payload(300, 'x');
    for (int k = 0; k < 4; ++k) p.u8(uint8_t(payload.size() >> (8 * k)));
    p.b += payload;
    p.str("n").long1(0x7f1234567800ull).str("t").i1(3).i1(4).op('\x86').op('u');
    const std::string bytes = p.stop();
    for (size_t piece : {1, 2, 3, 7, 64, 4096}) {
        FixedChunks chunks(bytes, piece);
        const std::string_view first = chunks.first();
        pickle::Document d = pickle::parse(first, chunks, "chunked.pickle");
        pickle::Ref s;
        ASSERT_TRUE(d.get(d.root(), "a_long_key_name", &s)) << piece;
        EXPECT_EQ(d.str(s), payload) << piece;
        EXPECT_EQ(uint64_t(d.get(d.root(), "n")->i), 0x7f1234567800ull) << piece;
        EXPECT_EQ(d.get(d.root(), "t")->len, 2u) << piece;
    }
    FixedChunks cut(std::string_view(bytes).substr(0, bytes.size() - 5), 3);
    const std::string_view first = cut.first();
    try {
        pickle::parse(first, cut, "cut.pickle");
        FAIL();
    } catch (const pickle::Error& e) {
        EXPECT_NE(std::string(e.what()).find("cut.pickle: offset "), std::string::npos);
    }
}

TEST(Pickle, RefusesEveryOpcodeThatImportsOrCalls) {
    // GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, EXT1, EXT2, EXT4, PERSID, BINPERSID
    for (char op : std::string("c\x93RbioP\x81\x92\x82\x83\x84Q", 13)) {
        P p;
        p.str("os").str("system").op(op);
        try {
            pickle::parse(p.stop(), "evil.pickle");
            FAIL() << "opcode " << int(uint8_t(op)) << " accepted";
        } catch (const pickle::Error& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find("evil.pickle: offset "), std::string::npos) << what;
            EXPECT_NE(what.find("refused"), std::string::npos) << what;
            EXPECT_EQ(e.offset, p.b.size() - 1);
        }
    }
}

TEST(Pickle, TruncatedInputFailsCleanlyAtEveryByte) {
    P p;
    p.op('}').memo().mark().str("device_traces").op(']').memo().mark().op(']').memo().op('e').op('u');  // {"device_traces": [[]]}
    const std::string whole = p.stop();
    for (size_t n = 0; n < whole.size(); ++n)
        EXPECT_THROW(pickle::parse(whole.substr(0, n), "cut.pickle"), pickle::Error) << n;
    EXPECT_NO_THROW(pickle::parse(whole, "whole.pickle"));
}

TEST(Pickle, HostileStructureIsAnErrorNotACrash) {
    const std::string cases[] = {
        P().op('u').stop(),                                  // SETITEMS without MARK
        P().op('a').stop(),                                  // APPEND on an empty stack
        P().i1(1).mark().i1(2).op('u').stop(),               // SETITEMS into an int
        P().get(3).stop(),                                   // memo never stored
        P().op('r').u8(0xff).u8(0xff).u8(0xff).u8(0x7f).stop(),  // huge memo index on empty stack
        P().op('X').u8(0xff).u8(0xff).u8(0xff).u8(0xff).stop(),  // string longer than the input
        P().op('}').mark().i1(1).op('u').stop(),             // odd number of dict items
        P().op('\xff').stop(),                               // unknown opcode
        P().stop(),                                          // STOP on an empty stack
    };
    for (const auto& c : cases) EXPECT_THROW(pickle::parse(c, "hostile.pickle"), pickle::Error);
    // A list that contains itself parses (pickle allows it); nothing walks it recursively.
    P self;
    self.op(']').memo().mark().get(0).op('e');
    EXPECT_NO_THROW(pickle::parse(self.stop(), "cycle.pickle"));
}

TEST(TorchSnapshot, ImportsTracesWithSharedFramesAndBothPendingSpellings) {
    P p;
    p.op('}').memo().mark();
    p.str("segments").op(']').mark();
    for (const char* state : {"active_pending_free", "active_awaiting_free", "active_allocated", "inactive"}) {
        p.op('}').mark().str("device").i1(0).str("address").long1(0x1000).str("total_size").i4(2 << 20)
            .str("stream").i1(0).str("blocks").op(']').mark()
            .op('}').mark().str("address").long1(0x1000).str("size").i4(512).str("state").str(state).op('u')
            .op('e').op('u');
    }
    p.op('e');
    p.str("device_traces").op(']').mark().op(']').mark();
    // frames list memoized at index 1 after the outer dict (0)
    p.op('}').mark().str("action").str("alloc").str("addr").long1(0x7f0000000000ull).str("size").i4(512)
        .str("stream").i1(0).str("time_us").i4(10).str("frames").op(']').memo().mark()
        .op('}').mark().str("filename").str("/home/u/train.py").str("line").i1(12).str("name").str("step").op('u')
        .op('e').op('u');
    p.b += entry("free_requested", 0x7f0000000000ull, 512);
    p.b += entry("free_completed", 0x7f0000000000ull, 512);
    p.b += entry("alloc", 0x7f0000000200ull, 512, 1);
    p.b += entry("segment_map", 0x7f0000000000ull, 2 << 20);
    p.b += entry("mystery_action", 0, 0);
    p.op('e').op('e').op('u');
    Trace t = import_torch_snapshot(p.stop(), "snap.pickle");
    ASSERT_EQ(t.events.size(), 4u);
    EXPECT_EQ(t.events[1].kind, EventKind::free) << "requested and completed at one instant: one free";
    EXPECT_EQ(t.events[2].stack, t.events[0].stack) << "shared frames list gives the same stack";
    ASSERT_NE(t.events[0].stack, 0u);
    const Frame& f = t.stacks.frame(t.stacks.node(t.events[0].stack).frame);
    EXPECT_EQ(t.stacks.string(f.file), "/home/u/train.py");
    EXPECT_EQ(f.line, 12u);
    EXPECT_EQ(t.final_blocks.size(), 3u) << "pending under either spelling counts as live";
    EXPECT_EQ(t.warnings.size(), 1u);
    // Final 3 live blocks (1536 B) minus the trace's net +512 B: 1024 B were there before it began.
    EXPECT_EQ(t.devices[0].baseline_allocated, 1024u);
}

TEST(TorchSnapshot, NonSnapshotPicklesAreNamedAsSuch) {
    P p;
    p.op(']');
    try {
        import_torch_snapshot(p.stop(), "list.pickle");
        FAIL();
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("not a torch memory snapshot"), std::string::npos);
    }
}

namespace {
// A sink that takes every batch of dicts and forgets them: what the snapshot importer does.
struct TakeDicts : pickle::Sink {
    size_t taken = 0, reclaims = 0;
    bool take(const pickle::Document& doc, pickle::Ref, const pickle::Ref* items, size_t n, size_t,
              pickle::Release& release) override {
        if (doc[items[0]].type != pickle::Type::dict) return false;
        release.forget.insert(release.forget.end(), items, items + n);
        taken += n;
        return true;
    }
    void reclaimed(pickle::Ref) override { ++reclaims; }
};

// [[{"k": 1}], [{"k": 2}]] then a GET of the first dict: it was taken, so it reads as forgotten.
std::string two_batches_then_get() {
    P p;
    p.op(']').memo().mark();                                        // outer list: memo 0
    p.op(']').memo().mark().op('}').memo().mark().str("k").i1(1).op('u').op('e');  // [ {k:1} ] memo 1, 2
    p.op(']').memo().mark().op('}').memo().mark().str("k").i1(2).op('u').op('e');  // memo 3, 4
    p.get(2);
    p.op('e');
    return p.stop();
}
}  // namespace

TEST(PickleSink, TakenItemsLeaveTheListAndTheirMemoReadsAsForgotten) {
    const std::string bytes = two_batches_then_get();
    TakeDicts sink;
    pickle::Document d = pickle::parse(bytes, "s.pickle", &sink);
    EXPECT_EQ(sink.taken, 2u);
    EXPECT_EQ(sink.reclaims, 2u);
    std::vector<pickle::Type> outer;
    d.for_each_item(d.root(), [&](pickle::Ref r) { outer.push_back(d[r].type); });
    ASSERT_EQ(outer.size(), 3u);
    EXPECT_EQ(outer[2], pickle::Type::forgotten);
    int inner_items = 0;
    d.for_each_item(d.root(), [&](pickle::Ref r) { d.for_each_item(r, [&](pickle::Ref) { ++inner_items; }); });
    EXPECT_EQ(inner_items, 0) << "taken items are counted, not kept";
    // Without a sink the same bytes give the whole document.
    pickle::Document whole = pickle::parse(bytes, "s.pickle");
    int whole_items = 0;
    whole.for_each_item(whole.root(), [&](pickle::Ref r) { whole.for_each_item(r, [&](pickle::Ref) { ++whole_items; }); });
    EXPECT_EQ(whole_items, 1 + 1 + 2) << "two one-dict lists, and the GET's dict (a key and a value)";
}

TEST(TorchSnapshot, AnEntryThatReusesAnEarlierFramesListIsStillRight) {
    // Entry B's frames list is a GET of entry A's, from an earlier batch the importer already took
    // and let go: the importer must notice and read the document whole.
    P p;
    p.op('}').memo().mark().str("device_traces").op(']').memo().mark().op(']').memo();  // memo 0, 1, 2
    auto entry = [&](const char* action, uint64_t addr, bool reuse) {
        p.mark().op('}').memo().mark().str("action").str(action).str("addr").long1(addr).str("size").i4(512)
            .str("stream").i1(0).str("time_us").i4(int32_t(addr & 0xffff)).str("frames");
        if (reuse) p.get(4);
        else p.op(']').memo().mark().op('}').memo().mark().str("filename").str("/home/u/train.py").str("line")
                 .i1(7).str("name").str("f").op('u').op('e');
        p.op('u').op('e');
    };
    entry("alloc", 0x7f0000000000ull, false);  // dict memo 3, frames memo 4, frame memo 5
    entry("alloc", 0x7f0000000200ull, true);
    p.op('e').op('u');
    Trace t = import_torch_snapshot(p.stop(), "reuse.pickle");
    ASSERT_EQ(t.events.size(), 2u);
    EXPECT_NE(t.events[0].stack, 0u);
    EXPECT_EQ(t.events[0].stack, t.events[1].stack);
    const Frame& f = t.stacks.frame(t.stacks.node(t.events[1].stack).frame);
    EXPECT_EQ(t.stacks.string(f.file), "/home/u/train.py");
}

TEST(TorchSnapshot, AFieldWhoseValueAnEarlierEntryLetGoIsStillRead) {
    // Entry A carries the string "alloc" under a field the importer does not read, so the parser
    // may drop it; entry B's action is a GET of that very string.
    P p;
    p.op('}').memo().mark().str("device_traces").op(']').memo().mark().op(']').memo();  // memo 0, 1, 2
    auto entry = [&](uint64_t addr, bool action_by_get) {
        p.mark().op('}').memo().mark().str("action");
        if (action_by_get) p.get(4);
        else p.str("alloc");
        p.str("addr").long1(addr).str("size").i4(512).str("stream").i1(0).str("time_us").i4(int32_t(addr & 0xffff));
        if (!action_by_get) p.str("compile_context").str("alloc").memo();  // memo 4 (the dict is 3)
        p.op('u').op('e');
    };
    entry(0x7f0000000000ull, false);
    entry(0x7f0000000200ull, true);
    p.op('e').op('u');
    Trace t = import_torch_snapshot(p.stop(), "field.pickle");
    ASSERT_EQ(t.events.size(), 2u);
    EXPECT_EQ(t.events[1].kind, EventKind::alloc);
    EXPECT_EQ(t.events[1].addr, 0x7f0000000200ull);
}

namespace {
// Takes the first batch of dicts the generic way and the later ones straight from the bytes: dicts
// {"key": int, string or [GETs]} as in batches_of_flat_dicts(), each list kept as the token 1000 +
// its first item's value.
struct TakeDirect : TakeDicts {
    std::vector<std::vector<int64_t>> direct;  // per dict: each field's integer, or its list's items
    size_t take_direct(pickle::DirectInput& in, pickle::Ref) override {
        size_t taken = 0;
        while (true) {
            const size_t memo_before = in.memo_size();
            const uint8_t* q = in.p;
            std::vector<int64_t> values;
            std::vector<std::pair<uint32_t, int64_t>> tokens;
            if (!read_dict(in, q, values, tokens)) {
                in.undo_puts(memo_before);
                return taken;
            }
            for (const auto& [index, token] : tokens) in.keep_as_token(index, token);
            in.p = q;
            direct.push_back(values);
            ++taken;
        }
    }
    // Bounds checked at every opcode, so that items at the very end of the input are read too.
    static bool read_dict(pickle::DirectInput& in, const uint8_t*& q, std::vector<int64_t>& values,
                          std::vector<std::pair<uint32_t, int64_t>>& tokens) {
        uint32_t index;
        bool out_of_order;
        auto opcode = [&] {
            in.skip_frame(q);
            return q < in.end ? *q++ : 0;
        };
        if (opcode() != '}') return false;
        in.put(q, pickle::kForgotten, index, out_of_order);
        const bool batch = q < in.end && *q == '(';
        q += batch;
        while (true) {
            uint8_t op = opcode();
            if (batch && op == 'u') return true;
            pickle::Ref r;
            if (op == 0x8c && q < in.end && size_t(in.end - q) > *q) q += 1 + *q;  // a key written out
            else if ((op != 'h' && op != 'j') || !in.get(q, op, r)) return false;
            in.put(q, pickle::kForgotten, index, out_of_order);
            op = opcode();
            int64_t v;
            if (in.integer(q, op, v)) {
                values.push_back(v);
            } else if (op == 0x8c && q < in.end && size_t(in.end - q) > *q) {  // a string: skipped
                q += 1 + *q;
                in.put(q, pickle::kForgotten, index, out_of_order);
            } else if (op == ']') {
                const bool listed = in.put(q, pickle::kForgotten, index, out_of_order);
                const size_t first = values.size();
                const bool items = q < in.end && *q == '(';
                q += items;
                for (op = opcode(); op == 'h' || op == 'j'; op = opcode()) {
                    if (!in.get(q, op, r)) return false;
                    values.push_back(in.doc()[r].i);
                }
                if (op != (items ? 'e' : 'a')) return false;
                if (listed && values.size() > first) tokens.emplace_back(index, 1000 + values[first]);
            } else {
                return false;
            }
            if (!batch) return opcode() == 's';
        }
    }
};

// A list of batches of {"n": i, "l": [GET of the int i*1000 memoized beforehand ...]} dicts,
// then GETs of the first batch's and of a later batch's lists.
std::string batches_of_flat_dicts(int batches, int per_batch) {
    P p;
    p.op(']').memo();                              // outer: memo 0
    p.mark().i4(7000000).memo();                   // memo 1: an int in the memo, for GETs
    p.op(']').memo();                              // the streamed list: memo 2
    int memo = 3, first_list = -1, later_list = -1;
    for (int b = 0; b < batches; ++b) {
        p.mark();
        for (int i = 0; i < per_batch; ++i) {
            p.op('}').memo().mark().str("n").memo().i4(b * per_batch + i).str("l").memo().op(']').memo();
            const int list = memo + 3;
            memo += 4;
            if (i % 2) p.mark().get(1).get(1).op('e');  // two items, or one by APPEND
            else p.get(1).op('a');
            p.op('u');
            if (b == 0 && i == 0) first_list = list;
            if (b == batches - 1 && i == 0) later_list = list;
        }
        p.op('e');
    }
    p.get(uint8_t(first_list)).op('j');  // LONG_BINGET: memo indices past 255
    for (int k = 0; k < 4; ++k) p.u8(uint8_t(uint32_t(later_list) >> (8 * k)));
    p.op('e');
    return p.stop();
}
}  // namespace

TEST(PickleSink, LaterBatchesComeStraightFromTheBytesAndAListKeptAsATokenReadsAsOne) {
    const std::string bytes = batches_of_flat_dicts(3, 5);
    TakeDirect sink;
    pickle::Document d = pickle::parse(bytes, "flat.pickle", &sink);
    EXPECT_EQ(sink.taken, 5u) << "the first batch, the generic way";
    ASSERT_EQ(sink.direct.size(), 10u) << "the two later batches, straight from the bytes";
    EXPECT_EQ(sink.direct[0], (std::vector<int64_t>{5, 7000000}));
    EXPECT_EQ(sink.direct[1], (std::vector<int64_t>{6, 7000000, 7000000}));
    std::vector<pickle::Value> outer;
    d.for_each_item(d.root(), [&](pickle::Ref r) { outer.push_back(d[r]); });
    ASSERT_EQ(outer.size(), 4u);
    EXPECT_EQ(outer[1].type, pickle::Type::list);
    EXPECT_EQ(outer[1].len, 15u) << "every item counted, none kept";
    EXPECT_EQ(outer[2].type, pickle::Type::list) << "what the generic take did not let go stays";
    EXPECT_EQ(outer[3].type, pickle::Type::token);
    EXPECT_EQ(outer[3].i, 1000 + 7000000);
    // Cut into pieces of every size, the items straddle chunks: read the generic way, the same.
    for (size_t piece : {1, 3, 17, 64}) {
        FixedChunks chunks(bytes, piece);
        TakeDirect cut;
        pickle::parse(chunks.first(), chunks, "flat.pickle", &cut);
        EXPECT_EQ(cut.taken + cut.direct.size(), 15u) << piece;
    }
}

// DirectInput decodes LONG1 on its own (one load where 8 bytes follow): every width reads as the
// generic path reads it, with bytes to spare after it and at the very end of the input.
TEST(PickleSink, DirectInputReadsLongsOfEveryWidthAsTheGenericPathDoes) {
    for (const bool room_after : {true, false}) {
        for_each_long([&](__int128 value, int n, bool fits, const std::string& op) {
            P p;
            p.op(']').memo().op(']').memo();                      // outer, then the streamed list
            p.mark().op('}').memo().str("n").memo().i1(0).op('s').op('e');  // its first batch: generic
            p.mark().op('}').memo();
            if (room_after) p.mark().str("pad").memo().str("sixteen bytes...").memo();
            p.get(3);  // "n"
            p.b += op;
            p.op(room_after ? 'u' : 's').op('e').op('a');
            const std::string bytes = p.stop();
            TakeDirect sink;
            pickle::parse(bytes, "long.pickle", &sink);
            const std::string what = "value " + std::to_string(int64_t(value)) + " in " + std::to_string(n) + " bytes";
            if (!fits) {
                EXPECT_EQ(sink.taken, 2u) << what << ": a big integer goes the generic way";
                return;
            }
            ASSERT_EQ(sink.direct.size(), 1u) << what;
            EXPECT_EQ(uint64_t(sink.direct[0].back()), uint64_t(value)) << what;
        });
    }
}

TEST(PickleSink, ATokenStaysWhenAnItemReadTheGenericWayLetsGoOfIt) {
    // Batch 1: item A, a flat dict, keeps its new list as a token; item B (a None: the generic
    // way) names that list too, and its sink lets go of what B names, as the snapshot importer
    // lets go of a free's frames. Other GETs of the list must still find the token.
    struct ForgetLists : TakeDirect {
        bool take(const pickle::Document& doc, pickle::Ref list, const pickle::Ref* items, size_t n, size_t offset,
                  pickle::Release& release) override {
            for (size_t i = 0; i < n; ++i)
                doc.for_each_pair(items[i], [&](pickle::Ref, pickle::Ref v) { release.forget.push_back(v); });
            return TakeDicts::take(doc, list, items, n, offset, release);
        }
    };
    P p;
    p.op(']').memo().mark().i4(7000000).memo().op(']').memo();  // outer 0, the int 1, the list 2
    p.mark();
    for (int i = 0; i < 2; ++i) p.op('}').memo().mark().str("n").i1(uint8_t(i)).str("l").op(']').memo().get(1).op('a').op('u');
    p.op('e');                                                                                     // memo 3 to 6
    p.mark().op('}').memo().mark().str("n").i1(5).str("l").op(']').memo().get(1).op('a').op('u');  // A: memo 7, 8
    p.op('}').memo().mark().str("n").op('N').str("l").get(8).op('u').op('e');                      // B: memo 9
    p.get(8).op('e');
    ForgetLists sink;
    pickle::Document d = pickle::parse(p.stop(), "token.pickle", &sink);
    ASSERT_EQ(sink.direct.size(), 1u);
    EXPECT_EQ(sink.taken, 3u);
    std::vector<pickle::Value> outer;
    d.for_each_item(d.root(), [&](pickle::Ref r) { outer.push_back(d[r]); });
    ASSERT_EQ(outer.size(), 3u);
    EXPECT_EQ(outer[2].type, pickle::Type::token);
    EXPECT_EQ(outer[2].i, 1000 + 7000000);
}

TEST(PickleSink, DictsAfterATakenListThatAreNotItsItemsAreReadForWhatTheyAre) {
    // [ [{n: 1}] (taken), then MARK {n: 2} TUPLE: a tuple, though its MARK lies right above the
    // taken list. Read as a flat dict at first, the parser finds out at TUPLE and says so.
    P p;
    p.op(']').memo().mark();
    p.op(']').memo().mark().op('}').memo().mark().str("n").i1(1).op('u').op('e');
    p.mark().op('}').memo().mark().str("n").i1(2).op('u').op('t');
    p.op('e');
    TakeDirect sink;
    EXPECT_THROW(pickle::parse(p.stop(), "tuple.pickle", &sink), pickle::NeedsWholeDocument);
    pickle::Document whole = pickle::parse(p.stop(), "tuple.pickle");
    std::vector<pickle::Type> outer;
    whole.for_each_item(whole.root(), [&](pickle::Ref r) { outer.push_back(whole[r].type); });
    EXPECT_EQ(outer, (std::vector<pickle::Type>{pickle::Type::list, pickle::Type::tuple}));
}

TEST(TorchSnapshot, ATraceReadsTheSameWhateverItsChunks) {
    // Many batches of entries that share frames lists as torch writes them (a stack's list is one
    // object: later entries GET it), a segment's list shared with the block allocated in it. In
    // one piece the later batches take the fast path; in small pieces the generic one.
    P p;
    p.op('}').memo().mark().str("device_traces").memo().op(']').memo().mark().op(']').memo();  // memo 0..3
    int memo = 4;
    int lists[3] = {-1, -1, -1};
    auto entry = [&](const char* action, uint64_t addr, int32_t time, int stack) {
        p.op('}').memo().mark().str("action").str(action).memo().str("addr").long1(addr).str("size").i4(512);
        p.str("stream").i1(0).str("time_us").i4(time).str("frames");
        memo += 2;
        if (lists[stack] >= 0) {
            p.get(uint8_t(lists[stack]));
        } else {
            lists[stack] = memo++;
            p.op(']').memo().mark().op('}').memo().mark().str("filename").str("/home/u/m.py").str("line")
                .i1(uint8_t(10 + stack)).str("name").str("f").op('u').op('e');
            ++memo;
        }
        p.op('u');
    };
    for (int batch = 0; batch < 6; ++batch) {
        p.mark();
        for (int i = 0; i < 40; ++i) {
            const uint64_t addr = 0x7f0000000000ull + uint64_t(batch * 40 + i) * 512;
            const int32_t time = 100 + 2 * (batch * 40 + i);
            if (batch == 0 && i == 0) entry("segment_alloc", addr, time, 2);
            entry("alloc", addr, time, batch == 0 && i == 0 ? 2 : i % 2);
            entry("free_requested", addr, time + 1, i % 2);  // a free's list may be the first of its stack
            entry("free_completed", addr, time + 1, i % 2);
        }
        p.op('e');
    }
    p.op('e').op('u');
    const std::string bytes = p.stop();
    const Trace whole = import_torch_snapshot(bytes, "shared.pickle");
    ASSERT_EQ(whole.events.size(), 1u + 6 * 40 * 2) << "a free and its completion at one instant are one event";
    EXPECT_TRUE(whole.faults.empty());
    EXPECT_NE(whole.events[1].stack, whole.events[3].stack);
    EXPECT_EQ(whole.events[3].stack, whole.events[7].stack);
    for (size_t piece : {size_t(1), size_t(5), size_t(333), size_t(4096)}) {
        const Trace cut = import_torch_snapshot([&] { return std::make_unique<FixedChunks>(bytes, piece); },
                                                "shared.pickle", bytes.size());
        ASSERT_EQ(cut.events.size(), whole.events.size()) << piece;
        for (size_t k = 0; k < cut.events.size(); ++k) {
            const Event &a = cut.events[k], &b = whole.events[k];
            ASSERT_TRUE(a.kind == b.kind && a.addr == b.addr && a.size == b.size && a.time_us == b.time_us &&
                        a.stack == b.stack && a.stream == b.stream)
                << "piece " << piece << ", event " << k;
        }
    }
}
