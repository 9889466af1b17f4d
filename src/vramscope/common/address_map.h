// Address -> what a live block needs, the one lookup replay and validation do per event: open
// addressing with linear probing and backward-shift deletion (no tombstones), several times
// faster than unordered_map.
#pragma once
#include <cstdint>
#include <vector>

namespace vramscope {

// A live block's key, whatever its device: addresses lie below 2^56, so the device goes above
// them. Replay and validation key their maps alike, so one can hand its blocks to the other.
inline uint64_t block_key(uint8_t device, uint64_t addr) { return addr ^ uint64_t(device) << 56; }

template <class Value>
class AddressMapOf {
public:
    static constexpr Value kMissing = Value(-1);

    explicit AddressMapOf(size_t capacity_hint = 1024) { rehash(grow_to(capacity_hint * 2)); }

    // Sets key's value; returns the one it replaced (kMissing if none): one probe for both.
    Value put(uint64_t key, Value value) {
        if ((size_ + 1) * 4 > slots_.size() * 3) rehash(slots_.size() * 2);
        size_t i = slot(key);
        while (slots_[i].used && slots_[i].key != key) i = (i + 1) & mask_;
        const Value old = slots_[i].used ? slots_[i].value : kMissing;
        if (!slots_[i].used) ++size_;
        slots_[i] = {key, value, true};
        return old;
    }

    Value get(uint64_t key) const {
        for (size_t i = slot(key);; i = (i + 1) & mask_) {
            if (!slots_[i].used) return kMissing;
            if (slots_[i].key == key) return slots_[i].value;
        }
    }

    // Removes key and returns its value (kMissing if absent).
    Value take(uint64_t key) {
        size_t i = slot(key);
        for (;; i = (i + 1) & mask_) {
            if (!slots_[i].used) return kMissing;
            if (slots_[i].key == key) break;
        }
        const Value value = slots_[i].value;
        // Shift later members of the probe run back so lookups never stop at a hole.
        for (size_t j = (i + 1) & mask_; slots_[j].used; j = (j + 1) & mask_) {
            const size_t home = slot(slots_[j].key);
            const bool between = i <= j ? (i < home && home <= j) : (i < home || home <= j);
            if (between) continue;
            slots_[i] = slots_[j];
            i = j;
        }
        slots_[i].used = false;
        --size_;
        return value;
    }

    size_t size() const { return size_; }

private:
    struct Slot {
        uint64_t key;
        Value value;
        bool used;
    };
    static size_t grow_to(size_t n) {
        size_t c = 16;
        while (c < n) c *= 2;
        return c;
    }
    size_t slot(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> shift_); }
    void rehash(size_t capacity) {
        std::vector<Slot> old;
        old.swap(slots_);
        slots_.assign(capacity, Slot{0, 0, false});
        mask_ = capacity - 1;
        shift_ = 64 - __builtin_ctzll(capacity);
        size_ = 0;
        for (const Slot& s : old)
            if (s.used) put(s.key, s.value);
    }
    std::vector<Slot> slots_;
    size_t mask_ = 0;
    unsigned shift_ = 0;
    size_t size_ = 0;
};

// Address -> an index into the replay's live blocks.
using AddressMap = AddressMapOf<uint32_t>;

}  // namespace vramscope
