#include "importers/torch_snapshot.h"

#include <algorithm>
#include <array>
#include <climits>
#include <optional>
#include <stdexcept>
#include <unordered_map>

#include "common/file.h"
#include "common/gzip_stream.h"
#include "common/read_ahead.h"
#include "importers/entry_decoder.h"
#include "importers/pickle.h"
#include "importers/snapshot_keys.h"
#include "events/validate.h"
#include "trace/reader.h"

namespace vramscope {
namespace {

using pickle::Document;
using pickle::Ref;
using pickle::Type;

// Builds a Trace from a snapshot. As a pickle::Sink it takes the trace entries while the parser
// reads them (a million entries never exist as a document at once); run() then reads the rest.
class SnapshotImporter : public pickle::Sink {
public:
    SnapshotImporter(Trace& trace, const std::string& name, const ReadLimits& limits, bool direct)
        : t_(trace), name_(name), limits_(limits), direct_(direct) {
        last_time_.fill(kNoTime);
    }

    [[gnu::flatten]] bool take(const Document& doc, Ref list, const Ref* items, size_t n, size_t offset,
                               pickle::Release& release) override {
        doc_ = &doc;
        offset_ = offset;
        if (!is_entry(items[0])) return false;
        size_t ordinal = ordinal_of(list);
        if (ordinal == streamed_lists_.size()) {
            if (ordinal == 0xFF) return false;
            streamed_lists_.push_back(list);
        }
        for (size_t i = 0; i < n; ++i) {
            release.forget.push_back(items[i]);
            read_entry(items[i], uint8_t(ordinal), &release);
        }
        return true;
    }

    // Later entries of a list take() took, straight from the bytes (EntryDecoder): each field
    // read as read_entry() reads it.
    [[gnu::flatten]] size_t take_direct(pickle::DirectInput& in, Ref list) override {
        doc_ = &in.doc();
        const size_t ordinal = ordinal_of(list);
        if (!direct_ || ordinal == streamed_lists_.size()) return 0;
        size_t taken = 0;
        for (const uint8_t* at = in.p; decoder_.decode(in, key_, decoded_); at = in.p) {
            if (is_annotation(decoded_)) {  // read from its dict (read_entry): not here
                in.undo_puts(decoded_.memo_before);
                in.p = at;
                break;
            }
            offset_ = in.offset(at);
            Entry entry{uint8_t(ordinal)};
            auto field = [&](Key k) {  // one call per key: each inlined for its key
                if (decoded_.has(k)) read_field(entry, k, decoded_[k], decoded_.frame_refs.data(), nullptr);
            };
            field(Key::action), field(Key::addr), field(Key::size), field(Key::stream), field(Key::time_us);
            field(Key::frames), field(Key::device_free);
            add_entry(entry);
            if (entry.frames_token >= 0 && decoded_.frames_list != DecodedEntry::kNoList)
                in.keep_as_token(decoded_.frames_list, entry.frames_token);
            ++taken;
        }
        return taken;
    }
    bool is_annotation(const DecodedEntry& d) {
        EventKind kind;
        bool annotate = false;
        return d.has(Key::action) && d[Key::action].kind == FieldValue::Kind::ref &&
               !action_of(d[Key::action].ref, kind, annotate) && annotate;
    }

    // The list's place among those take() took (their count if it is none of them).
    size_t ordinal_of(Ref list) const {
        return size_t(std::find(streamed_lists_.begin(), streamed_lists_.end(), list) - streamed_lists_.begin());
    }

    void reclaimed(Ref first) override {
        key_.forget_from(first);
        std::erase_if(actions_, [&](const Action& a) { return a.ref >= first; });
        std::erase_if(frame_cache_, [&](const auto& kv) { return kv.first >= first; });
        std::erase_if(string_cache_, [&](const auto& kv) { return kv.first >= first; });
        for (auto& [hash, bucket] : stack_cache_)
            std::erase_if(bucket, [&](const CachedStack& c) { return c.max_ref >= first; });
    }

    void run(const Document& doc) {
        doc_ = &doc;
        const Ref root = doc_->root();
        if ((*doc_)[root].type != Type::dict)
            throw std::runtime_error(name_ + ": not a torch memory snapshot (the pickle holds no dict)");
        Ref traces = 0, segments = 0, annotations = 0;
        const bool traces_key = doc_->get(root, "device_traces", &traces).has_value();
        const bool segments_key = doc_->get(root, "segments", &segments).has_value();
        if (!traces_key && !segments_key)
            throw std::runtime_error(name_ + ": not a torch memory snapshot (no 'segments' or 'device_traces')");
        const bool has_traces = traces_key && (*doc_)[traces].type == Type::list;
        const bool has_segments = segments_key && (*doc_)[segments].type == Type::list;
        if (traces_key && !has_traces) faults_.add("'device_traces' that is not a list");
        if (segments_key && !has_segments) faults_.add("'segments' that is not a list");
        if (has_segments) read_segments(segments);
        if (doc_->get(root, "external_annotations", &annotations) && (*doc_)[annotations].type == Type::list)
            read_annotations(annotations);
        Ref settings;
        if (doc_->get(root, "allocator_settings", &settings) && (*doc_)[settings].type == Type::dict)
            t_.allocator_settings = kept_value(settings, 0);
        // Entries taken while parsing carry the ordinal of their list; the list's place in
        // device_traces is its device. Entries of a list found elsewhere are not a trace: dropped.
        constexpr int kNotATrace = -1;
        std::vector<int> device_of(streamed_lists_.size(), kNotATrace);
        std::vector<std::pair<Ref, uint8_t>> stored;  // device lists still holding their entries
        last_time_.fill(kNoTime);  // stored lists are read by device, not by streamed ordinal
        if (has_traces) {
            uint16_t device = 0;
            doc_->for_each_item(traces, [&](Ref dev_trace) {
                if (device > 0xFF) throw std::runtime_error(name_ + ": more than 256 devices in one snapshot");
                for (size_t k = 0; k < streamed_lists_.size(); ++k)
                    if (streamed_lists_[k] == dev_trace) device_of[k] = device;
                if ((*doc_)[dev_trace].type == Type::list) {
                    t_.device(device);
                    stored.emplace_back(dev_trace, uint8_t(device));
                } else {
                    faults_.add("device traces that are not lists");
                }
                ++device;
            });
        }
        // Two passes over every event, unless each list taken is the device of its ordinal (the
        // usual case: a single device, or all of them in order).
        bool ordinal_is_device = true;
        for (size_t k = 0; k < device_of.size(); ++k) ordinal_is_device = ordinal_is_device && device_of[k] == int(k);
        if (!ordinal_is_device) {
            std::erase_if(t_.events, [&](const Event& e) { return device_of[e.device] == kNotATrace; });
            for (Event& e : t_.events) e.device = uint8_t(device_of[e.device]);
        }
        for (const auto& list_and_device : stored) {
            const uint8_t device = list_and_device.second;
            doc_->for_each_item(list_and_device.first, [&](Ref e) { read_entry(e, device); });
        }
        // What add_entry() tallied holds unless events moved to other devices or went.
        if (!ordinal_is_device) rescan_events();
        order_events(events_in_order_);
        compute_baselines();
        if (unknown_actions_)
            t_.warnings.push_back(name_ + ": skipped " + std::to_string(unknown_actions_) +
                                  " trace entries with an action this version does not know");
        if (cut_stacks_)
            t_.warnings.push_back(name_ + ": " + std::to_string(cut_stacks_) + " stacks deeper than " +
                                  std::to_string(limits_.max_stack_frames) + " frames kept their innermost " +
                                  std::to_string(limits_.max_stack_frames));
        faults_.into(t_.faults, name_);
    }

private:
    int64_t integer(Ref dict, std::string_view key, int64_t fallback = 0) const {
        Ref r;
        if (!doc_->get(dict, key, &r)) return fallback;
        const Type t = (*doc_)[r].type;
        return t == Type::integer || t == Type::boolean || t == Type::floating ? number(r) : fallback;
    }
    std::string_view string(Ref dict, std::string_view key) const {
        Ref r;
        return doc_->get(dict, key, &r) ? text(r) : std::string_view();
    }

    // A float counts when it fits 64 bits (NaN and infinities do not: converting them is undefined).
    bool is_number(Ref v) const {
        const pickle::Value& x = (*doc_)[v];
        if (x.type == Type::floating) return x.f >= -0x1p63 && x.f < 0x1p63;
        return x.type == Type::integer || x.type == Type::boolean;
    }
    int64_t number(Ref v) const {
        const pickle::Value& x = (*doc_)[v];
        if (!is_number(v)) return 0;
        return x.type == Type::floating ? int64_t(x.f) : x.i;
    }
    std::string_view text(Ref v) const { return (*doc_)[v].type == Type::string ? doc_->str(v) : std::string_view(); }

    // Actions are memoized strings too: one parse per distinct value.
    bool action_of(Ref v, EventKind& kind, bool& annotate) {
        for (const auto& a : actions_)
            if (a.ref == v) {
                kind = a.kind;
                annotate = a.annotate;
                return a.known;
            }
        const std::string_view name = text(v);
        Action a{v, EventKind::alloc, name == "annotate", false};
        // Torch's actions only: markers and the kinds of memory outside its allocator are vramscope's own.
        a.known = !a.annotate && parse_event_kind(name, a.kind) && a.kind != EventKind::step &&
                  a.kind != EventKind::microbatch && a.kind != EventKind::annotation_start &&
                  a.kind != EventKind::annotation_end && a.kind < EventKind::external_alloc;
        if (actions_.size() < 64) actions_.push_back(a);
        kind = a.kind;
        annotate = a.annotate;
        return a.known;
    }

    // Memoized strings are one value however often they are used: intern (and hash) each once.
    uint32_t string_id(Ref v) {
        auto [it, inserted] = string_cache_.try_emplace(v, 0);
        if (inserted) it->second = t_.stacks.intern_string(text(v));
        return it->second;
    }

    uint32_t frame_of(Ref f) {
        auto it = frame_cache_.find(f);
        if (it != frame_cache_.end()) return it->second;
        Frame fr;
        if ((*doc_)[f].type == Type::dict) {
            doc_->for_each_pair(f, [&](Ref k, Ref v) {
                switch (key_(*doc_, k)) {
                case Key::filename: fr.file = string_id(v); break;
                case Key::name: fr.function = string_id(v); break;
                case Key::line: fr.line = uint32_t(number(v)); break;
                default: break;
                }
            });
        }
        uint32_t id = t_.stacks.intern_frame(fr);
        frame_cache_.emplace(f, id);
        return id;
    }

    // A frames list's stack, and whether it was cut to limits_.max_stack_frames. A list read
    // before is a token by now (see add_entry): the stack and the cut, packed.
    struct StackRead {
        uint32_t stack = 0;
        bool cut = false;
        int64_t token() const { return int64_t(stack) | int64_t(cut) << 32; }
    };
    StackRead read_stack(const FieldValue& frames, const Ref* items) {
        if (frames.kind == FieldValue::Kind::refs) {
            refs_.assign(items + frames.first, items + frames.first + frames.count);
            return stack_of_refs();
        }
        if (frames.kind != FieldValue::Kind::ref) return {};
        const pickle::Value v = (*doc_)[frames.ref];
        if (v.type == Type::forgotten) throw pickle::NeedsWholeDocument();
        if (v.type == Type::token) return {uint32_t(v.i), bool(v.i >> 32)};
        if (v.type != Type::list) return {};
        refs_.clear();
        doc_->for_each_item(frames.ref, [&](Ref f) { refs_.push_back(f); });
        return stack_of_refs();
    }
    uint32_t stack_of(Ref frames) {
        FieldValue list;
        list.ref = frames;
        const StackRead s = read_stack(list, nullptr);
        cut_stacks_ += s.cut;
        return s.stack;
    }
    // Snapshots share frame dicts between entries (pickle's memo), so the sequence of their refs
    // identifies a stack: hash it, confirm against the refs kept for that hash, and only then
    // fall back to interning frame by frame.
    StackRead stack_of_refs() {
        if (refs_.empty()) return {};
        StackRead read;
        if (refs_.size() > limits_.max_stack_frames) {  // innermost first: the outermost go
            refs_.resize(limits_.max_stack_frames);
            read.cut = true;
        }
        uint64_t h = 0xcbf29ce484222325ull;
        Ref max_ref = 0;
        for (Ref r : refs_) h = (h ^ r) * 0x100000001b3ull, max_ref = std::max(max_ref, r);
        auto& bucket = stack_cache_[h];
        for (const CachedStack& c : bucket)
            if (c.refs == refs_) return read.stack = c.stack, read;
        uint32_t node = 0;
        for (size_t i = refs_.size(); i-- > 0;) node = t_.stacks.intern_stack(node, frame_of(refs_[i]));
        bucket.push_back(CachedStack{refs_, max_ref, node});
        read.stack = node;
        return read;
    }

    void read_segments(Ref segments) {
        doc_->for_each_item(segments, [&](Ref seg) {
            if ((*doc_)[seg].type != Type::dict) return;
            const std::optional<uint8_t> device = device_of(seg, 0, "segments");
            if (!device) return;
            const uint64_t base = uint64_t(integer(seg, "address"));
            const uint64_t stream = uint64_t(integer(seg, "stream"));
            const uint64_t total = uint64_t(integer(seg, "total_size"));
            reserved_[*device] += total;
            t_.final_reserved += total;
            t_.device(*device);
            t_.final_segments.push_back(LiveSegment{*device, base, total, stream, integer(seg, "is_expandable") != 0});
            check_held();
            Ref blocks;
            if (!doc_->get(seg, "blocks", &blocks) || (*doc_)[blocks].type != Type::list) return;
            uint64_t offset = base;  // older snapshots give no block address: blocks tile the segment
            doc_->for_each_item(blocks, [&](Ref b) {
                if ((*doc_)[b].type != Type::dict) return;
                const uint64_t size = uint64_t(integer(b, "size"));
                const uint64_t addr = uint64_t(integer(b, "address", int64_t(offset)));
                offset = addr + size;
                std::string_view state = string(b, "state");
                if (state != "active_allocated" && state != "active_pending_free" && state != "active_awaiting_free")
                    return;
                LiveBlock lb;
                lb.device = *device;
                lb.addr = addr;
                lb.size = size;
                lb.requested_size = uint64_t(integer(b, "requested_size", int64_t(size)));
                lb.stream = stream;
                lb.pending_free = state != "active_allocated";
                Ref frames;
                if (doc_->get(b, "frames", &frames)) lb.stack = stack_of(frames);
                // Trace entries carry the size asked for; so must the final state they are subtracted from.
                allocated_[*device] += lb.requested_size;
                t_.final_blocks.push_back(lb);
                check_held();
            });
        });
    }

    uint16_t stream_of(uint64_t handle) {  // entries mostly repeat the last stream
        if (handle != last_stream_handle_) last_stream_handle_ = handle, last_stream_ = t_.stream_index(handle);
        return last_stream_;
    }

    bool is_entry(Ref e) {
        if ((*doc_)[e].type != Type::dict) return false;
        bool found = false;
        doc_->for_each_pair(e, [&](Ref k, Ref v) { found = found || (key_(*doc_, k) == Key::action && (*doc_)[v].type == Type::string); });
        return found;
    }

    // What one trace entry says, gathered field by field.
    struct Entry {
        explicit Entry(uint8_t device) { ev.device = device; }
        Event ev;
        Ref action = 0;
        FieldValue frames;
        bool has_action = false, has_frames = false, has_addr = false, has_size = false, has_time = false;
        int64_t device_free = 0, size = 0;
        const Ref* frame_items = nullptr;  // where frames' items are, for FieldValue::Kind::refs
        int64_t frames_token = -1;  // the stack, when read from a list: what the list stays as
    };

    // One device_traces entry; with `release`, it also lets the parser drop the fields it does not
    // read, and keep a frames list as the stack read from it (torch shares one list between the
    // entries of a stack; a free's is its alloc's, unread).
    void read_entry(Ref e, uint8_t device, pickle::Release* release = nullptr) {
        if ((*doc_)[e].type != Type::dict) return faults_.add("trace entries that are not dicts");
        Entry entry(device);
        doc_->for_each_pair(e, [&](Ref k, Ref v) {
            FieldValue value;
            value.ref = v;
            read_field(entry, key_(*doc_, k), value, nullptr, release);
        });
        add_entry(entry, e);
        if (!release || !entry.has_frames) return;
        if (entry.frames_token >= 0) release->as_token.emplace_back(entry.frames.ref, entry.frames_token);
        else release->forget.push_back(entry.frames.ref);
    }

    bool is_number(const FieldValue& v) const {
        return v.kind == FieldValue::Kind::integer || (v.kind == FieldValue::Kind::ref && is_number(v.ref));
    }
    int64_t number(const FieldValue& v) const {
        return v.kind == FieldValue::Kind::integer ? v.integer : v.kind == FieldValue::Kind::ref ? number(v.ref) : 0;
    }

    void read_field(Entry& entry, Key key, const FieldValue& v, const Ref* items, pickle::Release* release) {
        const bool ref = v.kind == FieldValue::Kind::ref;
        // A field this reads, whose value an earlier entry let go: only the whole document has
        // it. (Frames are checked where they are read: frees share their alloc's, unread.)
        if (ref && key != Key::other && key != Key::frames && (*doc_)[v.ref].type == Type::forgotten)
            throw pickle::NeedsWholeDocument();
        auto numeric = [&](const char* field, bool& seen) {
            seen = is_number(v);
            if (!seen) faults_.add(std::string("trace entries whose '") + field + "' is not a number");
            return number(v);
        };
        switch (key) {
        case Key::action:
            if (ref) entry.action = v.ref, entry.has_action = true;
            break;
        case Key::addr: entry.ev.addr = uint64_t(numeric("addr", entry.has_addr)); break;
        case Key::size: entry.size = numeric("size", entry.has_size); break;
        case Key::stream: entry.ev.stream = stream_of(uint64_t(number(v))); break;
        case Key::time_us: entry.ev.time_us = numeric("time_us", entry.has_time); break;
        case Key::frames:
            entry.frames = v, entry.has_frames = true;
            entry.frame_items = items;
            break;
        case Key::device_free: entry.device_free = number(v); break;
        default:
            // Fields not read here (compile_context, user_metadata, ...): torch pickles a
            // fresh string for each, which the memo would otherwise keep alive.
            if (release && ref) release->forget.push_back(v.ref);
            break;
        }
    }

    // `e`: the entry's dict, for an annotation (take_direct leaves those to read_entry).
    void add_entry(Entry& entry, Ref e = pickle::kForgotten) {
        Event& ev = entry.ev;
        bool annotate = false;
        if (!entry.has_action || !action_of(entry.action, ev.kind, annotate)) {
            if (annotate) read_annotation(e, ev.device);  // older builds put annotations here
            else ++unknown_actions_;
            return;
        }
        if (ev.kind == EventKind::oom) ev.addr = uint64_t(entry.device_free), entry.has_addr = true;
        check_entry(ev, ev.device, entry.has_addr, entry.has_size, entry.has_time, entry.size);
        ev.size = uint64_t(entry.size);
        // A list is read whatever the event (entries share them: a segment's with the block
        // allocated in it), so that the parser can keep it as its stack alone.
        const bool list = entry.has_frames && (entry.frames.kind == FieldValue::Kind::refs ||
                                               (entry.frames.kind == FieldValue::Kind::ref &&
                                                (*doc_)[entry.frames.ref].type == Type::list));
        if (list || (entry.has_frames && has_stack(ev.kind))) {
            const StackRead s = read_stack(entry.frames, entry.frame_items);
            if (has_stack(ev.kind)) ev.stack = s.stack, cut_stacks_ += s.cut;
            if (list) entry.frames_token = s.token();
        }
        // A completion right after its request, at the same instant, is one `free`.
        if (ev.kind == EventKind::free_completed && !t_.events.empty() && completes(t_.events.back(), ev) &&
            t_.events.back().time_us == ev.time_us) {
            t_.events.back().kind = EventKind::free;  // a free_requested, which added nothing
            tally(t_.events.back(), false);
            return;
        }
        tally(ev, true);
        t_.events.push_back(ev);
        if (__builtin_expect((t_.events.size() & 0xFFF) == 0, 0)) check_held();
    }

    // What makes an entry untrustworthy: a field missing, a negative size, time running back.
    void check_entry(const Event& ev, uint8_t list, bool has_addr, bool has_size, bool has_time, int64_t size) {
        if (!has_addr) faults_.add("trace entries without an 'addr'");
        if (!has_size) faults_.add("trace entries without a 'size'");
        if (!has_time) faults_.add("trace entries without a 'time_us'");
        if (size < 0) faults_.add("trace entries with a negative size");
        if (has_time && ev.time_us < last_time_[list]) faults_.add("trace entries earlier than the entry before them");
        if (has_time) last_time_[list] = ev.time_us;
    }

    void read_annotation(Ref a, uint8_t fallback_device) {
        const std::optional<uint8_t> device = device_of(a, fallback_device, "annotations");
        if (!device) return;
        std::string_view stage = string(a, "stage");
        Event ev;
        ev.kind = stage == "END" ? EventKind::annotation_end : EventKind::annotation_start;
        ev.device = *device;
        ev.time_us = integer(a, "time_us");
        ev.name = t_.stacks.intern_string(string(a, "name"));
        notes_.push_back(ev);
        check_held();
    }

    // A dict's "device": events name 8-bit devices, so a larger or negative number (device 0 once
    // cut to 8 or 16 bits) is a fault, and what it is on is left out.
    std::optional<uint8_t> device_of(Ref dict, uint8_t fallback, std::string_view what) {
        const int64_t device = integer(dict, "device", fallback);
        if (device >= 0 && device <= 0xFF) return uint8_t(device);
        faults_.add(std::string(what) + " on a device number outside 0 to 255");
        return std::nullopt;
    }

    // A small value kept whole (allocator_settings: a dozen flags and numbers), held to the limit.
    // An item of another type, nested deeper than a settings dict, or let go with the trace entries
    // that shared it through the memo (PYTORCH_CUDA_ALLOC_CONF's "" as their compile_context) is
    // left out: what was written is not known then.
    static bool keepable(Type t) {
        return t == Type::none || t == Type::boolean || t == Type::integer || t == Type::floating || t == Type::string ||
               t == Type::list || t == Type::tuple || t == Type::dict;
    }
    SnapshotValue kept_value(Ref r, int depth) {
        constexpr int kMaxDepth = 4;
        SnapshotValue v;
        const pickle::Value x = (*doc_)[r];
        const bool deeper = depth + 1 < kMaxDepth;
        switch (x.type) {
        case Type::boolean: v.kind = SnapshotValue::Kind::boolean, v.integer = x.i; break;
        case Type::integer: v.kind = SnapshotValue::Kind::integer, v.integer = x.i; break;
        case Type::floating: v.kind = SnapshotValue::Kind::floating, v.floating = x.f; break;
        case Type::string: v.kind = SnapshotValue::Kind::string, v.string = std::string(text(r)); break;
        case Type::list:
        case Type::tuple:
            v.kind = SnapshotValue::Kind::list;
            doc_->for_each_item(r, [&](Ref item) {
                if (deeper && keepable((*doc_)[item].type)) v.items.emplace_back("", kept_value(item, depth + 1));
            });
            break;
        case Type::dict:
            v.kind = SnapshotValue::Kind::dict;
            doc_->for_each_pair(r, [&](Ref key, Ref item) {
                if (deeper && (*doc_)[key].type == Type::string && keepable((*doc_)[item].type))
                    v.items.emplace_back(std::string(text(key)), kept_value(item, depth + 1));
            });
            break;
        default: break;
        }
        kept_settings_bytes_ += sizeof(SnapshotValue) + v.string.size();
        check_held();
        return v;
    }

    // What reading keeps: events, annotations, the final live blocks and segments, the allocator's
    // settings, each growing vector at its growth charge. Pickle's memo lets one list of blocks or
    // annotations be referenced many times; each reference costs its expansion.
    void check_held() {
        const uint64_t held = kGrowthCharge * ((t_.events.size() + notes_.size()) * sizeof(Event) +
                                               t_.final_blocks.size() * sizeof(LiveBlock) +
                                               t_.final_segments.size() * sizeof(LiveSegment)) +
                              kept_settings_bytes_;
        if (held > limits_.max_held_bytes)
            throw std::runtime_error(name_ + ": offset " + std::to_string(offset_) + ": more than " +
                                     std::to_string(limits_.max_held_bytes >> 20) +
                                     " MiB of events and live blocks (the limit; --max-memory raises it)");
    }

    void read_annotations(Ref list) {
        doc_->for_each_item(list, [&](Ref a) {
            if ((*doc_)[a].type == Type::dict) read_annotation(a, 0);
        });
    }

    // Each device's trace and the annotations are in time order: one device needs only a merge
    // of the two, several a sort. At one instant a region's start goes before the events and its
    // end after them, so the events belong inside.
    static int rank(EventKind k) { return k == EventKind::annotation_start ? 0 : k == EventKind::annotation_end ? 2 : 1; }
    static bool before(const Event& a, const Event& b) {
        return a.time_us != b.time_us ? a.time_us < b.time_us : rank(a.kind) < rank(b.kind);
    }
    void order_events(bool in_order) {
        std::stable_sort(notes_.begin(), notes_.end(), before);
        std::vector<Event>& ev = t_.events;
        if (!in_order) std::stable_sort(ev.begin(), ev.end(), before);
        // Merge from the back, in place: no second copy of the events.
        size_t i = ev.size(), j = notes_.size();
        ev.resize(ev.size() + notes_.size());
        for (size_t k = ev.size(); j > 0;) {
            if (i > 0 && before(notes_[j - 1], ev[i - 1])) ev[--k] = ev[--i];
            else ev[--k] = notes_[--j];
        }
    }

    // What the events add to each device, by an event's device (8 bits: no hash lookup per event).
    // Unsigned, so hostile sizes wrap instead of overflowing; validate_events() faults them.
    // What the events add to each device, by an event's device (8 bits: no hash lookup per event).
    // Unsigned, so hostile sizes wrap instead of overflowing; validate_events() faults them.
    struct Deltas {
        std::array<uint64_t, 256> allocated{}, reserved{};
    };
    static void add_delta(Deltas& d, const Event& e) {
        switch (e.kind) {
        case EventKind::alloc: d.allocated[e.device] += e.size; break;
        case EventKind::free_completed:
        case EventKind::free: d.allocated[e.device] -= e.size; break;
        case EventKind::segment_alloc:
        case EventKind::segment_map: d.reserved[e.device] += e.size; break;
        case EventKind::segment_free:
        case EventKind::segment_unmap: d.reserved[e.device] -= e.size; break;
        default: break;
        }
    }
    // The events' deltas and time order, kept as add_entry() adds them (a pass over hundreds of
    // MB afterwards cost more): an event `e` is added, or the last one became `e`.
    void tally(const Event& e, bool added) {
        if (added && !t_.events.empty()) events_in_order_ = events_in_order_ && !before(e, t_.events.back());
        add_delta(deltas_, e);
    }
    void rescan_events() {
        deltas_ = {};
        events_in_order_ = true;
        for (size_t i = 0; i < t_.events.size(); ++i) {
            events_in_order_ = events_in_order_ && !(i > 0 && before(t_.events[i], t_.events[i - 1]));
            add_delta(deltas_, t_.events[i]);
        }
    }

    // The trace may start after the program did (or the ring buffer wrapped): what was allocated
    // before its first event is the final state minus what the trace added (annotations add
    // nothing).
    void compute_baselines() {
        for (DeviceInfo& info : t_.devices) {  // 0 to 255: device_of() left the others out
            const uint16_t k = info.device;
            info.baseline_allocated = uint64_t(std::max<int64_t>(0, int64_t(allocated_[k] - deltas_.allocated[k])));
            info.baseline_reserved = uint64_t(std::max<int64_t>(0, int64_t(reserved_[k] - deltas_.reserved[k])));
        }
    }

    struct Action {
        Ref ref;
        EventKind kind;
        bool annotate, known;
    };
    static constexpr int64_t kNoTime = INT64_MIN;
    const Document* doc_ = nullptr;
    Trace& t_;
    const std::string& name_;
    const ReadLimits& limits_;
    const bool direct_;  // take_direct() reads entries (ImportPath::direct)
    size_t offset_ = 0;  // of the batch being taken, for messages
    FaultTally faults_;
    std::array<int64_t, 256> last_time_;  // per list, to see time run back
    size_t cut_stacks_ = 0;
    std::unordered_map<Ref, uint32_t> string_cache_;
    KeyCache key_;
    EntryDecoder decoder_;
    DecodedEntry decoded_;
    std::vector<Action> actions_;
    std::vector<Event> notes_;      // annotations, merged into the events in time order
    uint64_t kept_settings_bytes_ = 0;
    Deltas deltas_;                 // what t_.events add to each device (tally())
    bool events_in_order_ = true;   // t_.events in time order (tally())
    uint64_t last_stream_handle_ = 0;
    uint16_t last_stream_ = 0;      // Trace::streams[0] is stream 0
    std::vector<Ref> streamed_lists_;  // device trace lists whose entries were taken while parsing
    std::unordered_map<Ref, uint32_t> frame_cache_;
    struct CachedStack {
        std::vector<Ref> refs;
        Ref max_ref;  // refs at or past a reclaim point are stale: the entry goes with them
        uint32_t stack;
    };
    std::unordered_map<uint64_t, std::vector<CachedStack>> stack_cache_;
    std::vector<Ref> refs_;
    std::unordered_map<uint16_t, uint64_t> allocated_, reserved_;
    size_t unknown_actions_ = 0;
};

}  // namespace

bool looks_like_pickle(std::string_view b) { return b.size() >= 2 && uint8_t(b[0]) == 0x80 && uint8_t(b[1]) <= 5; }

namespace {
// Parses with the importer as the parser's sink; a pickle that refers back to a taken entry (no
// torch snapshot does) is parsed again whole.
template <class Parse>
Trace import_with(const std::string& name, size_t pickle_bytes, const ReadLimits& limits, ImportPath path, Parse&& parse) {
    auto import = [&](bool stream) {
        Trace trace;
        trace.source = name;
        trace.format = "torch-snapshot";
        trace.limits = limits;
        // A trace entry takes 45 pickle bytes at least (60 to 90 in real snapshots): room for all
        // of them, so the events are never copied as they grow (a copy doubled the peak memory
        // of a file of small entries). Untouched capacity costs only address space.
        trace.events.reserve(std::min<size_t>(pickle_bytes / 40, limits.max_held_bytes / sizeof(Event)));
        SnapshotImporter importer(trace, name, limits, path == ImportPath::direct);
        importer.run(parse(stream ? &importer : nullptr));
        return trace;
    };
    if (path == ImportPath::whole_document) return import(false);
    try {
        return import(true);
    } catch (const pickle::NeedsWholeDocument&) {
        return import(false);
    }
}

Trace load_plain(std::string_view bytes, const std::string& path, const ReadLimits& limits) {
    if (has_vscope_magic(bytes)) return parse_trace(bytes, path, limits);
    if (looks_like_pickle(bytes)) return import_torch_snapshot(bytes, path, limits);
    throw std::runtime_error(path + ": offset 0: neither a .vscope trace nor a torch memory snapshot pickle "
                                    "(plain or gzip)");
}

// `open` gives the gzip'd input from its start, `head` its first decoded bytes, `gz_bytes` its size.
Trace load_gzip(const std::function<std::unique_ptr<GzipStream>()>& open, const std::string& head, uint64_t gz_bytes,
                const std::string& path, const ReadLimits& limits) {
    // Told by its first decoded bytes, before inflating more: a gzip of anything else is refused
    // at once, however large it would inflate.
    if (has_vscope_magic(head)) {
        const Bytes plain = read_all(*open());
        return parse_trace(view(plain), path, limits);
    }
    if (!looks_like_pickle(head))
        throw std::runtime_error(path + ": offset 0: gzip data whose content is neither a .vscope trace nor a "
                                        "torch memory snapshot pickle");
    // Each parse (a second one only if the sink must be dropped) reads its own stream.
    return import_torch_snapshot(open, path, 16 * gz_bytes, limits);
}
}  // namespace

Trace import_torch_snapshot(std::string_view bytes, const std::string& name, const ReadLimits& limits, ImportPath path) {
    return import_with(name, bytes.size(), limits, path,
                       [&](pickle::Sink* sink) { return pickle::parse(bytes, name, sink, limits); });
}

Trace import_torch_snapshot(const std::function<std::unique_ptr<ChunkSource>()>& open, const std::string& name,
                            size_t size_hint, const ReadLimits& limits, ImportPath path) {
    return import_with(name, size_hint, limits, path, [&](pickle::Sink* sink) {
        const std::unique_ptr<ChunkSource> chunks = open();
        std::string_view first;
        chunks->next(first);
        return pickle::parse(first, *chunks, name, sink, limits);
    });
}

Trace load_bytes(std::string_view bytes, const std::string& name, const ReadLimits& limits) {
    Trace t = is_gzip(bytes) ? load_gzip([&] { return std::make_unique<GzipStream>(bytes, name, limits.max_decoded_bytes); },
                                         gunzip_prefix(bytes, 16), bytes.size(), name, limits)
                             : load_plain(bytes, name, limits);
    validate_events(t);
    return t;
}

Trace load_any(const std::string& path, const ReadLimits& limits) {
    std::string head;
    {
        FileChunks probe(path, limits.max_decoded_bytes, 16);
        std::string_view h;
        if (probe.next(h)) head = h;
    }
    // A .vscope file and a plain pickle stream through in fixed blocks, a gzip'd file is read in
    // pieces as it is inflated: no whole-file buffer.
    if (is_gzip(head)) {
        FileChunks start(path, limits.max_decoded_bytes, 1 << 16);
        Trace t = load_gzip([&] { return std::make_unique<GzipStream>(std::make_unique<FileChunks>(path, limits.max_decoded_bytes, 0),
                                                                      path, limits.max_decoded_bytes); },
                            gunzip_prefix(start, 16), start.size(), path, limits);
        validate_events(t);
        return t;
    }
    if (!has_vscope_magic(head) && !looks_like_pickle(head)) {
        const Bytes file = read_file(path, limits.max_decoded_bytes);
        return load_bytes(view(file), path, limits);
    }
    Trace t = has_vscope_magic(head)
                  ? read_trace(path, limits)
                  : import_torch_snapshot([&] { return std::make_unique<ReadAheadFile>(path, limits.max_decoded_bytes); },
                                          path, file_size(path), limits);
    validate_events(t);
    return t;
}

}  // namespace vramscope
