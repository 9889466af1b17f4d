#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang and runs them for SECONDS each (default 600), seeded
# with the recorded fixtures:  fuzz/run.sh [SECONDS] [pickle|trace ...]
# Needs Debian's clang and its runtime: apt-get install clang libclang-rt-dev (or -14 variants).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
targets=${*:-pickle trace}
cc=$(command -v clang++ || command -v clang++-14)
cmake -S . -B build/fuzz -G Ninja -DVRAMSCOPE_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cc" >/dev/null
cmake --build build/fuzz --target fuzz_pickle fuzz_trace
cmake -S . -B build/dev -G Ninja >/dev/null && cmake --build build/dev --target vramscope-core
mkdir -p build/fuzz/corpus/pickle build/fuzz/corpus/trace
for f in tests/data/*.pickle.gz; do
  name=$(basename "$f" .pickle.gz)
  { printf '\000'; gunzip -c "$f"; } > "build/fuzz/corpus/pickle/$name.pickle"
  build/dev/vramscope-core convert "$f" "build/fuzz/seed.vscope" >/dev/null
  { printf '\001'; cat build/fuzz/seed.vscope; } > "build/fuzz/corpus/trace/$name.vscope"
done
# Small, whole snapshots too: the fuzzer mutates structure best from inputs under max_len.
python3 - <<'PY'
import glob, gzip, pickle
for f in sorted(glob.glob("tests/data/*.pickle.gz")):
    snap = pickle.load(gzip.open(f))
    snap["device_traces"] = [t[:60] for t in snap["device_traces"]]
    snap["segments"] = snap["segments"][:2]
    name = f.split("/")[-1].replace(".pickle.gz", "")
    for cut in (0, 7, 64):  # first byte: chunk size for the harness (0: whole)
        open(f"build/fuzz/corpus/pickle/small_{cut}_{name}.pickle", "wb").write(bytes([cut]) + pickle.dumps(snap))
PY
for target in $targets; do
  build/fuzz/fuzz_$target -max_total_time="$seconds" -max_len=${MAX_LEN:-65536} -timeout=10 -rss_limit_mb=4096 \
    -print_final_stats=1 build/fuzz/corpus/$target 2>&1 | tail -n 15 | tee "build/fuzz/$target.log"
done
