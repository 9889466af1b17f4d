// Where steps end and what one step is (Steps::unit): markers that name their unit, the
// optimizer's annotations, and the period of a loop with neither, cut at its outermost unit.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>

#include "analysis/steps.h"
#include "importers/torch_snapshot.h"
#include "recorded_fixtures.h"
#include "trace_builder.h"

using namespace vramscope;
using vramscope::testing::TraceBuilder;

namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;

// A chat loop that reuses its KV cache across turns, with no optimizer: each turn allocates its
// prompt and mask, prefills, decodes tokens_in_turn(k) tokens (the model's forward and the grown
// cache each time) and keeps its reply; at_turn_end(k) adds what else the turn does. Returns the
// index of each turn's first event.
std::vector<size_t> chat(TraceBuilder& b, size_t turns, size_t (*tokens_in_turn)(size_t),
                         const std::function<void(size_t)>& at_turn_end = {}) {
    const char* model = "/usr/lib/python3/site-packages/transformers/models/llama/modeling_llama.py";
    const uint32_t prompt = b.stack({{"/home/u/chat.py", 12, "chat_turn"}});
    const uint32_t mask = b.stack({{"/home/u/chat.py", 13, "chat_turn"}});
    const uint32_t reply = b.stack({{"/home/u/chat.py", 20, "chat_turn"}});
    const uint32_t cache = b.stack({{model, 300, "update"}, {"/home/u/chat.py", 16, "chat_turn"}});
    std::vector<uint32_t> forward;
    for (uint32_t layer = 0; layer < 4; ++layer)
        forward.push_back(b.stack({{model, 100 + layer, "forward"}, {"/home/u/chat.py", 16, "chat_turn"}}));
    uint64_t cache_bytes = 0, next_reply = 0x9000'0000;
    std::vector<size_t> starts;
    auto forward_pass = [&] {
        for (size_t i = 0; i < forward.size(); ++i) b.alloc(0x1000'0000 + i * MiB, 512 * KiB, forward[i]);
        for (size_t i = 0; i < forward.size(); ++i) b.free(0x1000'0000 + i * MiB, 512 * KiB);
        const uint64_t grown = cache_bytes + 8 * KiB;  // the cache grows by one token's keys and values
        b.alloc(0x4000'0000 + grown, grown, cache);
        if (cache_bytes) b.free(0x4000'0000 + cache_bytes, cache_bytes);
        cache_bytes = grown;
    };
    for (size_t k = 0; k < turns; ++k) {
        starts.push_back(b.t.events.size());
        b.alloc(0x2000'0000, 4 * KiB, prompt);
        b.alloc(0x2100'0000, 4 * KiB, mask);
        forward_pass();  // the prefill
        for (size_t token = 0; token < tokens_in_turn(k); ++token) forward_pass();
        b.alloc(next_reply, 2 * KiB, reply);
        next_reply += 2 * KiB;
        b.free(0x2000'0000, 4 * KiB);
        b.free(0x2100'0000, 4 * KiB);
        if (at_turn_end) at_turn_end(k);
    }
    return starts;
}

size_t varying_tokens(size_t turn) { return 3 + (turn * 7) % 11; }

}  // namespace

TEST(Steps, MarkersCarryTheirUnitAndTheMostCommonOneNamesTheSteps) {
    TraceBuilder b;
    const uint32_t s = b.stack({{"/home/u/train.py", 10, "main"}});
    for (int i = 0; i < 3; ++i) b.alloc(0x1000, 512, s), b.free(0x1000, 512), b.annotation(EventKind::step, "eval batch");
    for (int i = 0; i < 5; ++i) b.alloc(0x1000, 512, s), b.free(0x1000, 512), b.annotation(EventKind::step, "optimizer step");
    const Steps steps = find_steps(b.t);
    EXPECT_EQ(steps.source, StepsSource::markers);
    EXPECT_EQ(steps.ends.size(), 8u);  // every marker ends a step: the capture chose which to write
    EXPECT_EQ(steps.unit, "optimizer step");
}

TEST(Steps, MarkersWithoutAUnitAreSteps) {
    TraceBuilder b;
    const uint32_t s = b.stack({{"/home/u/train.py", 10, "main"}});
    for (int i = 0; i < 4; ++i) b.alloc(0x1000, 512, s), b.free(0x1000, 512), b.step();
    EXPECT_EQ(find_steps(b.t).unit, "step");
    TraceBuilder old;  // what the recorder wrote before markers named their unit
    for (int i = 0; i < 4; ++i) old.alloc(0x1000, 512, s), old.free(0x1000, 512), old.annotation(EventKind::step, "step");
    EXPECT_EQ(find_steps(old.t).unit, "step");
}

TEST(Steps, TheOptimizersAnnotationsAreOptimizerSteps) {
    TraceBuilder b;
    const uint32_t s = b.stack({{"/home/u/train.py", 10, "main"}});
    for (int i = 0; i < 4; ++i) {
        b.alloc(0x1000, 512, s);
        b.free(0x1000, 512);
        b.annotation(EventKind::annotation_start, "Optimizer.step#SGD.step");
        b.annotation(EventKind::annotation_end, "Optimizer.step#SGD.step");
    }
    const Steps steps = find_steps(b.t);
    EXPECT_EQ(steps.source, StepsSource::optimizer_annotations);
    EXPECT_EQ(steps.unit, "optimizer step");
}

// A GAN whose discriminator steps twice per generator step: the first optimizer seen (the
// generator here) ends the steps, as the live session counts them, and a file is read once.
TEST(Steps, WithSeveralOptimizersTheFirstSeenEndsTheSteps) {
    TraceBuilder b;
    const uint32_t s = b.stack({{"/home/u/gan.py", 10, "train"}});
    for (int i = 0; i < 12; ++i) {
        b.alloc(0x1000, 512, s);
        b.free(0x1000, 512);
        b.annotation(EventKind::annotation_start, "Optimizer.step#Adam.step G");
        b.annotation(EventKind::annotation_end, "Optimizer.step#Adam.step G");
        for (int d = 0; d < 2; ++d) {
            b.annotation(EventKind::annotation_start, "Optimizer.step#Adam.step D");
            b.annotation(EventKind::annotation_end, "Optimizer.step#Adam.step D");
        }
    }
    const Steps steps = find_steps(b.t);
    EXPECT_EQ(steps.detail, "Optimizer.step#Adam.step G");
    EXPECT_EQ(steps.ends.size(), 12u);
    FirstOptimizer first;
    EXPECT_TRUE(first.ends_step(7, 0));
    EXPECT_FALSE(first.ends_step(8, 0));
    EXPECT_FALSE(first.ends_step(7, 1));
}

TEST(Steps, AnInferenceLoopIsCutIntoTurnsNotDecodedTokens) {
    TraceBuilder b;
    const std::vector<size_t> turn_starts = chat(b, 20, varying_tokens);
    const Steps steps = find_steps(b.t);
    EXPECT_EQ(steps.source, StepsSource::inferred_period);
    EXPECT_EQ(steps.unit, "repeat of chat.py:12 chat_turn");
    // The first turn opens step 0; each later one ends the step before it.
    ASSERT_EQ(steps.ends.size(), turn_starts.size() - 1);
    for (size_t k = 1; k < turn_starts.size(); ++k) EXPECT_EQ(steps.ends[k - 1], turn_starts[k] - 1);
}

TEST(Steps, TurnsOfEqualLengthAreTurnsToo) {
    TraceBuilder b;
    chat(b, 16, [](size_t) -> size_t { return 6; });
    const Steps steps = find_steps(b.t);
    EXPECT_EQ(steps.unit, "repeat of chat.py:12 chat_turn");
    EXPECT_EQ(steps.ends.size(), 15u);
}

TEST(Steps, TooFewTurnsToJudgeLeaveTheStepsAtTheInnerRepeat) {
    TraceBuilder b;
    chat(b, 6, varying_tokens);
    const Steps steps = find_steps(b.t);
    EXPECT_EQ(steps.source, StepsSource::inferred_period);
    EXPECT_NE(steps.unit, "repeat of chat.py:12 chat_turn");
    EXPECT_GT(steps.ends.size(), 6u * 3);
}

TEST(Steps, AnAllocationRepeatedAsOftenAtStartUpIsNotTheTurn) {
    TraceBuilder b;
    const uint32_t setup = b.stack({{"/home/u/chat.py", 5, "load"}});
    for (uint64_t i = 0; i < 20; ++i) b.alloc(0x8000'0000 + i * MiB, MiB, setup);  // as many as the turns
    const std::vector<size_t> turn_starts = chat(b, 20, varying_tokens);
    const Steps steps = find_steps(b.t);
    EXPECT_EQ(steps.unit, "repeat of chat.py:12 chat_turn");
    EXPECT_EQ(steps.ends.size(), turn_starts.size() - 1);
}

TEST(Steps, ALoneSiteThatFiresEveryFewTurnsDoesNotOutweighTheTurn) {
    TraceBuilder b;
    const uint32_t checkpoint = b.stack({{"/home/u/chat.py", 40, "save_history"}});
    const std::vector<size_t> turn_starts = chat(b, 40, varying_tokens, [&](size_t turn) {
        if (turn % 2 == 0) b.alloc(0xA000'0000 + turn * MiB, MiB, checkpoint);
    });
    const Steps steps = find_steps(b.t);
    EXPECT_EQ(steps.unit, "repeat of chat.py:12 chat_turn");
    EXPECT_EQ(steps.ends.size(), turn_starts.size() - 1);
}

// The real runs recorded on a GPU, with neither annotations nor torch.optim's frames. The outer
// unit never merges training steps; and where varying batches or compiled graphs made the largest
// count something else (37 and 199 "steps" of 30), the step is found again.
TEST(Steps, RecordedTrainingLoopsWithoutTheOptimizerAreCutNoCoarserThanTheirSteps) {
    for (const std::filesystem::path& file : vramscope::testing::recorded_snapshots()) {
        SCOPED_TRACE(file.filename().string());
        Trace t = load_any(file.string());
        const auto first_alloc = std::find_if(t.events.begin(), t.events.end(), [](const Event& e) { return e.kind == EventKind::alloc; });
        const Steps annotated = find_steps(t);
        const size_t recorded_steps = std::count_if(annotated.ends.begin(), annotated.ends.end(),
                                                    [&](size_t end) { return end > size_t(first_alloc - t.events.begin()); });
        std::vector<int8_t> in_optimizer(t.stacks.stack_count() + 1, 0);
        for (uint32_t s = 1; s <= t.stacks.stack_count(); ++s)
            for (uint32_t f : t.stacks.frames_of(s))
                if (t.stacks.string(t.stacks.frame(f).file).find("/torch/optim/") != std::string_view::npos) in_optimizer[s] = 1;
        std::erase_if(t.events, [&](const Event& e) {
            return e.kind == EventKind::annotation_start || e.kind == EventKind::annotation_end ||
                   (e.kind == EventKind::alloc && in_optimizer[e.stack]);
        });
        const Steps inferred = find_steps(t);
        EXPECT_EQ(inferred.source, StepsSource::inferred_period);
        // A period opens its first step at its first occurrence and leaves its last one unfinished.
        EXPECT_GE(inferred.ends.size() + 2, recorded_steps) << inferred.unit;
        const std::string name = file.filename().string();
        if (name.starts_with("clean_varlen") || name.starts_with("leak_compiled_outputs"))
            EXPECT_NEAR(double(inferred.ends.size()), double(recorded_steps), 1.0) << inferred.unit;
    }
}

// The recorded chat (tests/data/record_fixtures.py, leak_kv_cache_turns): 30 turns of 8..24 decoded
// tokens each, no optimizer; cut at each turn's prompt, not at its tokens.
TEST(Steps, TheRecordedChatIsCutIntoItsTurns) {
    const Steps steps = find_steps(load_any(std::string(VRAMSCOPE_TEST_DATA) + "/leak_kv_cache_turns.pickle.gz"));
    EXPECT_EQ(steps.source, StepsSource::inferred_period);
    EXPECT_EQ(steps.ends.size(), 29u);
    EXPECT_TRUE(steps.unit.starts_with("repeat of record_fixtures.py:")) << steps.unit;
    EXPECT_TRUE(steps.unit.ends_with(" scenario_leak_kv_cache_turns")) << steps.unit;
}
