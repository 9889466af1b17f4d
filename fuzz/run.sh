#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang (ASan + UBSan) and runs each for SECONDS (default
# 600), one after another on one core, seeded with the recorded fixtures and the hostile corpus
# (tests/data/hostile):  fuzz/run.sh [SECONDS] [snapshot|findings_json|pickle|trace|compare|matrix ...]
# matrix is fuzz/fuzz_matrix.py, under atheris (pip install atheris) or its own mutator.
# Logs go to $FUZZ_LOGS (default build/fuzz); crashes to $FUZZ_LOGS/crashes-TARGET/.
# Needs Debian's clang and its runtime: apt-get install clang libclang-rt-dev (or -14 variants),
# and the package installed (the seeds are made with `vramscope`).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
targets=${*:-snapshot findings_json pickle trace compare matrix}
logs=${FUZZ_LOGS:-build/fuzz}
cc=$(command -v clang++ || command -v clang++-14)
cmake -S . -B build/fuzz -G Ninja -DVRAMSCOPE_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cc" >/dev/null
seeds=build/fuzz/corpus
mkdir -p "$seeds"/{pickle,trace,snapshot,findings_json,compare,matrix} "$logs"
for f in tests/data/*.pickle.gz; do
  name=$(basename "$f" .pickle.gz)
  cp "$f" "$seeds/snapshot/$name.pickle.gz"
  { printf '\000'; gunzip -c "$f"; } > "$seeds/pickle/$name.pickle"
  python3 -m vramscope convert "$f" "$seeds/snapshot/$name.vscope" >/dev/null
  { printf '\001'; cat "$seeds/snapshot/$name.vscope"; } > "$seeds/trace/$name.vscope"
  python3 -m vramscope analyze "$f" --json "$seeds/findings_json/$name.json" >/dev/null
done
for f in tests/data/hostile/*; do
  case "$f" in
    *.json) [ "$(basename "$f")" = expectations.json ] || cp "$f" "$seeds/findings_json/" ;;
    *.vscope) cp "$f" "$seeds/snapshot/"; { printf '\000'; cat "$f"; } > "$seeds/trace/$(basename "$f")" ;;
    *.pickle) cp "$f" "$seeds/snapshot/"; { printf '\000'; cat "$f"; } > "$seeds/pickle/$(basename "$f")" ;;
    *.gz) cp "$f" "$seeds/snapshot/" ;;
  esac
done
# Small, whole snapshots too: the fuzzer mutates structure best from inputs under max_len.
python3 - "$seeds" <<'PY'
import glob, gzip, io, pickle, sys
seeds = sys.argv[1]
for f in sorted(glob.glob("tests/data/*.pickle.gz")):
    snap = pickle.load(gzip.open(f))
    snap["device_traces"] = [t[:60] for t in snap["device_traces"]]
    snap["segments"] = snap["segments"][:2]
    name = f.split("/")[-1].replace(".pickle.gz", "")
    small = pickle.dumps(snap)
    open(f"{seeds}/snapshot/small_{name}.pickle", "wb").write(small)
    # Batches of 8 (Python's own pickler writes 1,000): later batches take the importer's fast
    # path (pickle::Sink::take_direct), which a small input otherwise never reaches.
    batched = io.BytesIO()
    pickler = pickle._Pickler(batched, protocol=4)
    pickler._BATCHSIZE = 8
    pickler.dump(snap)
    open(f"{seeds}/snapshot/batched_{name}.pickle", "wb").write(batched.getvalue())
    for cut in (0, 7, 64):  # first byte: chunk size for the harness (0: whole)
        open(f"{seeds}/pickle/small_{cut}_{name}.pickle", "wb").write(bytes([cut]) + small)
PY
# compare.json with the findings it names inline, as fuzz_compare.cpp reads them: a.json, b.json.
python3 - "$seeds/compare" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob("tests/data/hostile/compare_*.json")):
    run, parts = json.load(open(f)), []
    for cell in run["cells"]:
        name = cell.get("findings")
        if name and len(parts) < 2 and os.path.exists(f"tests/data/hostile/{name}"):
            parts.append(open(f"tests/data/hostile/{name}", "rb").read())
            cell["findings"] = "ab"[len(parts) - 1] + ".json"
    seed = b"\0CELL\0".join([json.dumps(run).encode(), *parts])
    open(f"{sys.argv[1]}/{os.path.basename(f)}", "wb").write(seed)
PY
for target in $targets; do
  if [ "$target" = matrix ]; then  # Python: atheris when installed, else the seeded mutator
    mkdir -p "$logs/crashes-matrix"
    start=$(date -u +%FT%TZ)
    if python3 -c 'import atheris' 2>/dev/null; then
      python3 fuzz/fuzz_matrix.py "$seeds/matrix" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$logs/crashes-matrix/" -print_final_stats=1 > "$logs/matrix.log" 2>&1 || true
    else
      python3 fuzz/fuzz_matrix.py --mutate "$seconds" "$seeds/matrix" > "$logs/matrix.log" 2>&1 || true
    fi
    echo "$start matrix ${seconds}s: $(grep -E '^stat::number_of_executed_units|runs in' "$logs/matrix.log" | tail -1)" \
      | tee -a "$logs/summary.txt"
    continue
  fi
  cmake --build build/fuzz --target "fuzz_$target" >/dev/null
  mkdir -p "$logs/crashes-$target"
  start=$(date -u +%FT%TZ)
  build/fuzz/fuzz_$target -max_total_time="$seconds" -max_len=${MAX_LEN:-65536} -timeout=10 -rss_limit_mb=4096 \
    -artifact_prefix="$logs/crashes-$target/" -print_final_stats=1 "$seeds/$target" > "$logs/$target.log" 2>&1 || true
  echo "$start $target ${seconds}s: $(grep -E '^stat::number_of_executed_units' "$logs/$target.log" | awk '{print $2}') runs," \
       "$(ls "$logs/crashes-$target" | wc -l) crashes" | tee -a "$logs/summary.txt"
done
