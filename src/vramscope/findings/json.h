// Findings as JSON (schema in docs/findings.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "findings/findings.h"

namespace vramscope {

// Every step of every device is written: a text that would hold more than `max_held_bytes`
// (--max-memory) with the timelines it is written from is refused first, naming the limit.
std::string to_json(const Findings& f, uint64_t max_held_bytes = UINT64_MAX);
// Several inputs (ranks, runs): {"schema_version", "verdict": worst of them, "runs": [...]}.
std::string to_json(const std::vector<Findings>& runs, const RankComparison& ranks = {}, uint64_t max_held_bytes = UINT64_MAX);
// What the HTML report embeds: the same findings, each device's steps as columns (at most 1,500
// points a series: the last step of each bucket, the highest peak in it), each leak's bytes held
// per step on the same points, and no block lists.
std::string to_report_json(const std::vector<Findings>& runs, const RankComparison& ranks);

// An owner as people read it: "main() local 'cache'[3]  → Tensor 8.0 MiB ..." and its kind
// when it is not plainly reachable (python/vramscope/owners/paths.py OwnerPath.__str__ says the same).
std::string owner_line(const Owner& o);

// Whose memory a leak is, when not torch's caching allocator's ("device memory from NCCL
// (cuMemCreate, outside torch's allocator)"); "" for torch's. The terminal, the live line and the
// report (as the leak's `memory_words`) all say it so.
std::string memory_words(Memory memory, const std::string& library, const std::string& call);
// A leak's: the innermost frame of a stack outside torch's allocator is the library's, its function the driver call.
std::string memory_words(const SiteFinding& l);

// "default" for stream 0 (the legacy default stream), else "side".
const char* stream_kind(uint64_t stream);

}  // namespace vramscope
