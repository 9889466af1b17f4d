"""Builds the hostile-input corpus (issue 13) next to this file, with expectations.json: what
`vramscope` must do with each file. Run it with the package installed (it uses `vramscope
convert` for the .vscope damage):  python tests/data/hostile/make_corpus.py

Outcomes:
  error         analyze, convert, export and report exit 2 with a message naming the file
  over-limit    the trace reads, but what analysis derives from it passes --max-memory: analyze,
                export and report exit 2 naming the file and the option; convert passes
  cannot-judge  analyze exits 0 with verdict "cannot-judge" (2 with --fail-on-leak), never
                "NO LEAK"; report draws the page; convert and export refuse (exit 2)
  nothing       nothing to judge (too few steps): cannot-judge, but convert and export pass on
                what there is
  empty         no memory event at all: cannot-judge; report draws the page; convert and export
                refuse (exit 2: the file they would write says nothing)
  judged        analyze exits 0 with a verdict; convert, export and report succeed
  report-error  (findings JSON) report exits 2 naming the file
  report-ok     (findings JSON) report draws the page
  matrix-error  (a compare matrix) compare exits 2 before running anything, its message holding
                `says` (the field at fault), and writes nothing
  table-ok      (a compare.json) compare-table exits 0 and gives each row of `statuses` its status
  table-error   (a compare.json) compare-table exits 2, its message holding `says`
  cell          (findings of a compare cell, read through a compare.json)
"""

from __future__ import annotations

import copy
import gzip
import json
import pickle
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASE = HERE.parent / "leak_ctx_losses.pickle.gz"
EXPECT: dict[str, dict[str, str]] = {}


def put(name: str, data: bytes, outcome: str, why: str, **more) -> None:
    (HERE / name).write_bytes(data)
    EXPECT[name] = {"outcome": outcome, "why": why, **more}


def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def base(entries: int | None = None) -> dict:
    """The fixture, or its first `entries` trace entries (small files for damage that needs no leak)."""
    s = pickle.load(gzip.open(BASE))
    if entries:
        s["device_traces"] = [t[:entries] for t in s["device_traces"]]
    return s


def snapshot(s: dict) -> bytes:
    return gz(pickle.dumps(s, protocol=4))


# Pickle opcodes, for inputs Python's pickler would never write.
PROTO, STOP, MARK, EMPTY_DICT, EMPTY_LIST, APPENDS, SETITEMS = b"\x80\x04", b".", b"(", b"}", b"]", b"e", b"u"


def s8(text: str) -> bytes:
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


def hand_pickles() -> None:
    # 1. An empty batch (MARK, then APPENDS with nothing) in the lists the importer streams:
    # the 22-byte segfault, and what `export --memory-viz` writes for empty lists.
    for key in ("segments", "device_traces"):
        other = "device_traces" if key == "segments" else "segments"
        data = PROTO + EMPTY_DICT + MARK + s8(key) + EMPTY_LIST + MARK + APPENDS + s8(other) + EMPTY_LIST + SETITEMS + STOP
        put(f"empty_batch_{key}.pickle", data, "empty", "empty APPENDS in " + key + "; no events")
    # Every opcode that would import or call code.
    code_ops = {"GLOBAL": b"cos\nsystem\n", "STACK_GLOBAL": s8("os") + s8("system") + b"\x93", "REDUCE": b"NN" + b"R",
                "BUILD": b"}N" + b"b", "INST": b"(ios\nsystem\n", "OBJ": b"(N" + b"o", "NEWOBJ": b"N)" + b"\x81",
                "NEWOBJ_EX": b"N)}" + b"\x92", "EXT1": b"\x82\x01", "EXT2": b"\x83\x01\x00", "EXT4": b"\x84\x01\x00\x00\x00",
                "PERSID": b"P1\n", "BINPERSID": b"N" + b"Q", "NEXT_BUFFER": b"\x97", "READONLY_BUFFER": b"N\x98"}
    for name, ops in code_ops.items():
        put(f"code_{name.lower()}.pickle", b"\x80\x05" + ops + STOP, "error", f"{name} would import or call")
    put("empty_file.pickle", b"", "error", "no bytes")
    put("proto_only.pickle", PROTO, "error", "cut short before any opcode")
    put("unknown_opcode.pickle", PROTO + b"\xff" + STOP, "error", "opcode 0xff")
    # Declared lengths far past the input, and past the string limit.
    put("huge_binunicode.pickle", PROTO + b"X\xff\xff\xff\xff" + b"abc", "error", "4 GiB string declared")
    put("huge_binbytes8.pickle", PROTO + b"\x8e" + struct.pack("<Q", 1 << 62) + b"abc", "error", "2^62-byte bytes declared")
    put("huge_long4.pickle", PROTO + b"\x8b" + struct.pack("<I", 0xFFFFFFF0) + b"\x01", "error", "4 GiB integer declared")
    put("text_int_overflow.pickle", b"I99999999999999999999999999\n.", "error", "text INT past 64 bits")
    put("sparse_memo.pickle", PROTO + b"N" + b"r" + struct.pack("<I", 1 << 28) + STOP, "error", "memo index 2^28")
    put("memo_get_unset.pickle", PROTO + b"j" + struct.pack("<I", 7) + STOP, "error", "GET of a memo entry never set")
    put("deep_marks.pickle.gz", gz(PROTO + MARK * 100_000 + STOP), "error", "100,000 containers open at once")
    put("stack_underflow.pickle", PROTO + APPENDS + STOP, "error", "APPENDS without MARK")
    put("trailing_after_stop.pickle", pickle.dumps({"segments": [], "device_traces": []}, protocol=4) + b"garbage",
        "error", "bytes after STOP")
    put("root_not_dict.pickle", pickle.dumps([1, 2, 3], protocol=4), "error", "a list, not a snapshot")
    put("no_snapshot_keys.pickle", pickle.dumps({"a": 1}, protocol=4), "error", "a dict without snapshot keys")
    # Bombs: small on disk, huge decoded.
    put("gzip_zeros.gz", gz(bytes(47 << 20)), "error", "47 MB of zeros: not a pickle, refused at its first bytes")
    put("gzip_text.gz", gz(b"hello " * 100_000), "error", "gzip of text")
    put("pickle_dict_bomb.pickle.gz",
        gz(PROTO + EMPTY_LIST + (MARK + EMPTY_DICT * 1000 + APPENDS) * 16_000 + STOP), "error",
        "16 M empty dicts in one list (20 bytes held each): over --max-memory 256MiB")
    put("pickle_zero_string_bomb.pickle.gz", gz(PROTO + b"\x8d" + struct.pack("<Q", 1 << 40) + bytes(64 << 20)), "error",
        "a 1 TiB string declared, 64 MiB of it present")


def schema_damage() -> None:
    good = base(600)
    put("leak_ctx_losses.pickle.gz", BASE.read_bytes(), "judged", "the fixture itself")

    def variant(name: str, outcome: str, why: str, change) -> None:
        s = copy.deepcopy(good)
        change(s)
        put(name, snapshot(s), outcome, why)

    variant("traces_a_dict.pickle.gz", "cannot-judge", "'device_traces' is a dict",
            lambda s: s.__setitem__("device_traces", {"0": s["device_traces"][0]}))
    variant("traces_a_string.pickle.gz", "cannot-judge", "'device_traces' is a string",
            lambda s: s.__setitem__("device_traces", "none"))
    variant("trace_not_list.pickle.gz", "cannot-judge", "a device trace is an int", lambda s: s.__setitem__("device_traces", [7]))
    variant("segments_a_string.pickle.gz", "cannot-judge", "'segments' is a string", lambda s: s.__setitem__("segments", "x"))

    def each(change):
        def apply(s):
            for k, e in enumerate(s["device_traces"][0]):
                change(k, e)
        return apply

    variant("times_missing.pickle.gz", "cannot-judge", "no time_us", each(lambda k, e: e.pop("time_us")))
    variant("times_reversed.pickle.gz", "cannot-judge", "time runs backwards",
            lambda s: s["device_traces"].__setitem__(0, list(reversed(s["device_traces"][0]))))
    variant("times_zero.pickle.gz", "cannot-judge", "time_us 0, then real times",
            each(lambda k, e: e.__setitem__("time_us", 0) if k == len(good["device_traces"][0]) - 1 else None))
    variant("sizes_negative.pickle.gz", "cannot-judge", "negative sizes",
            each(lambda k, e: e.__setitem__("size", -e["size"]) if e["action"] == "alloc" else None))
    variant("size_a_string.pickle.gz", "cannot-judge", "size is a string", each(lambda k, e: e.__setitem__("size", "big")))
    variant("size_nan.pickle.gz", "cannot-judge", "size NaN", each(lambda k, e: e.__setitem__("size", float("nan"))))
    variant("time_inf.pickle.gz", "cannot-judge", "time_us infinite", each(lambda k, e: e.__setitem__("time_us", float("inf"))))
    variant("addr_2_80.pickle.gz", "cannot-judge", "an address of 2^80 (a LONG1 of 11 bytes)",
            each(lambda k, e: e.__setitem__("addr", 1 << 80)))
    variant("time_negative.pickle.gz", "cannot-judge", "times before 1970", each(lambda k, e: e.__setitem__("time_us", -e["time_us"] - 10**18 + k)))
    variant("addr_missing.pickle.gz", "cannot-judge", "no addr", each(lambda k, e: e.pop("addr")))
    variant("action_an_int.pickle.gz", "empty", "action 5: entries without an action, then none left",
            each(lambda k, e: e.__setitem__("action", 5)))
    variant("entries_not_dicts.pickle.gz", "cannot-judge", "entries are lists",
            lambda s: s["device_traces"].__setitem__(0, [list(e.items()) for e in s["device_traces"][0]]))
    variant("frames_not_list.pickle.gz", "judged", "frames a string: stacks empty, the events still sound",
            each(lambda k, e: e.__setitem__("frames", "x")))
    variant("size_2_63.pickle.gz", "cannot-judge", "a size of 2^63",
            each(lambda k, e: e.__setitem__("size", 1 << 63) if k == 5 and e["action"] == "alloc" else None))

    def double_alloc(s):
        t = s["device_traces"][0]
        first = next(e for e in t if e["action"] == "alloc")
        t.insert(t.index(first) + 1, dict(first))
    variant("double_alloc.pickle.gz", "cannot-judge", "an address allocated twice without a free", double_alloc)

    def unknown_free(s):
        t = s["device_traces"][0]
        t.insert(1, dict(t[0], action="free_completed", addr=0xDEAD000, time_us=t[0]["time_us"]))
    variant("free_unknown_addr.pickle.gz", "judged", "a free of an address never allocated (from before the trace)", unknown_free)
    variant("no_traces_only_segments.pickle.gz", "empty", "no trace history",
            lambda s: s.__setitem__("device_traces", [[]]))

    # Hostile strings: names that would change a terminal or the report page.
    evil = {"<!--<script>": "page", "</script><script>alert(1)</script>": "page", "a\u2028b\u2029c": "page",
            "\x1b[2J\x1b]0;owned\x07": "terminal", "forged\r\nLEAK  +9 TiB/step": "terminal", "nul\x00byte": "terminal",
            "lone\udcffsurrogate": "not UTF-8 (pickled with surrogatepass)"}

    def rename(s):
        s.update(base())
        every, seen = "".join(evil), set()
        for e in s["device_traces"][0]:
            for f in e.get("frames", []):
                if "record_fixtures.py" in f["filename"] and id(f) not in seen:  # frames are shared dicts
                    seen.add(id(f))
                    f["name"] = every + f["name"]
        s["device_traces"][0][0]["frames"].insert(0, {"name": "<!--<script>", "filename": "\x1b[31mred.py", "line": 1})
    variant("hostile_names.pickle.gz", "judged", "function names with <!--<script>, </script>, U+2028, ESC, CR/LF, NUL", rename)

    # A memoised 64 MiB string as the file name of 8,000 frames: refused by the string limit.
    big = "a" * (64 << 20)
    frames = [{"filename": big, "name": f"f{k}", "line": k} for k in range(8000)]
    t = [{"action": "alloc", "addr": 512 * k, "size": 512, "stream": 0, "time_us": k, "frames": [frames[k]]} for k in range(8000)]
    put("string_64mib_fanout.pickle.gz", snapshot({"segments": [], "device_traces": [t]}), "error",
        "one memoised 64 MiB string, the file of 8,000 frames")
    # Under the limit (4 MiB), the same fan-out must be quick: each string is hashed once.
    mid = "b" * (4 << 20)
    for f in frames:
        f["filename"] = mid
    put("string_4mib_fanout.pickle.gz", snapshot({"segments": [], "device_traces": [t]}), "nothing",
        "one memoised 4 MiB string, the file of 8,000 frames (no steps: nothing to judge, and it is read in bounded time)")
    # A memoised frame referenced 60,000 times in each of 40 stacks.
    frame = {"filename": "loop.py", "name": "recurse", "line": 1}
    t = [{"action": "alloc", "addr": 512 * k, "size": 512, "stream": 0, "time_us": k, "frames": [frame] * 60_000}
         for k in range(40)]
    put("frame_fanout_60k.pickle.gz", snapshot({"segments": [], "device_traces": [t]}), "judged",
        "one memoised frame referenced 60,000 times per stack: stacks cut to their innermost 4,096")


def stream_damage() -> None:
    raw = pickle.dumps(base(200), protocol=4)
    whole = BASE.read_bytes()
    put("cut_half.pickle", raw[: len(raw) // 2], "error", "pickle cut in half")
    put("cut_half.pickle.gz", whole[: len(whole) // 2], "error", "gzip cut in half")
    crc = bytearray(whole)
    crc[-8] ^= 0x01
    put("gzip_crc_flipped.pickle.gz", bytes(crc), "error", "one bit of the CRC-32 flipped")
    isize = bytearray(whole)
    isize[-1] ^= 0x01
    put("gzip_length_wrong.pickle.gz", bytes(isize), "error", "the length trailer off")
    put("gzip_trailing_garbage.pickle.gz", whole + b"garbage!", "error", "bytes after the gzip member")
    put("gzip_second_member.pickle.gz", whole + gz(b"more"), "error", "a second member: bytes after the pickle's STOP")
    for frac in (3, 2):
        flipped = bytearray(whole)
        flipped[len(whole) // frac] ^= 0x10
        put(f"gzip_bitflip_{frac}.pickle.gz", bytes(flipped), "error", "a bit flipped in the deflate data")
    flipped = bytearray(raw)
    flipped[len(raw) // 2] ^= 0x01
    put("pickle_bitflip.pickle", bytes(flipped), "error", "a bit flipped in a plain pickle (an opcode or a length)")


def chunks(data: bytes) -> list[bytes]:
    out, off = [], 12
    while off + 12 <= len(data):
        (length,) = struct.unpack_from("<I", data, off + 4)
        out.append(data[off: off + 12 + length])
        off += 12 + length
    return out


def chunk(payload: bytes) -> bytes:
    return b"VSCK" + struct.pack("<II", len(payload), zlib.crc32(payload)) + payload


def vscope_damage() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "t.vscope"
        subprocess.run([sys.executable, "-m", "vramscope", "convert", str(BASE), str(out), "--chunk-size", "2KiB"], check=True, capture_output=True)
        data = out.read_bytes()
    header, cs = data[:12], chunks(data)
    assert len(cs) >= 3, "the fixture should make several chunks"
    join = lambda parts: header + b"".join(parts)  # noqa: E731
    put("good.vscope", data, "judged", "a whole version-2 file")
    put("cut_inside_only_chunk.vscope", header + cs[0][: len(cs[0]) // 2], "empty", "cut inside its first chunk: 0 events")
    put("header_only.vscope", header, "empty", "no chunks at all")
    put("cut_at_boundary.vscope", join(cs[:-2]), "judged", "cut at a chunk boundary: a warning (no end record)")
    put("chunk_duplicated.vscope", join(cs[:2] + cs[1:]), "cannot-judge", "chunk 1 twice")
    put("chunks_swapped.vscope", join([cs[0], cs[2], cs[1]] + cs[3:]), "cannot-judge", "chunks 1 and 2 swapped")
    put("chunk_dropped.vscope", join(cs[:1] + cs[2:]), "cannot-judge", "chunk 1 missing")
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x01
    put("bitflip.vscope", bytes(flipped), "cannot-judge", "a bit flipped: checksum mismatch")
    put("after_end.vscope", data + cs[0], "cannot-judge", "a chunk after the end record")
    # The end record says one event more than the chunks hold (its CRC made right).
    end = cs[-1][12:]
    tag_end = end.index(b"\x19", 1)
    count = 0
    for k, b in enumerate(end[tag_end + 1:]):
        count |= (b & 0x7F) << (7 * k)
        if not b & 0x80:
            break
    varint = bytearray()
    n = count + 1
    while True:
        varint.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not varint[-1] & 0x80:
            break
    put("end_count_wrong.vscope", join(cs[:-1] + [chunk(end[:tag_end + 1] + bytes(varint))]), "cannot-judge",
        "the end record's event count differs from the chunks'")
    # Version 1 (no chunk numbers, no end record): still read, with a note.
    v1 = [chunk(c[12:][2 if c[13] < 0x80 else 3:]) for c in cs[:-1]]
    put("version1.vscope", b"\x89VSCOPE\n\x01\x00\x00\x00" + b"".join(v1), "judged", "the old format")
    put("version9.vscope", b"\x89VSCOPE\n\x09\x00\x00\x00" + b"".join(cs), "error", "a version this build does not read")
    garbage_len = header + b"VSCK" + struct.pack("<II", 0xFFFFFFFF, 0)
    put("chunk_length_huge.vscope", garbage_len, "cannot-judge", "a chunk length of 4 GiB")
    put("vscope_gzipped.vscope.gz", gz(data), "judged", "a gzip'd .vscope")


def findings_json() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "f.json"
        subprocess.run([sys.executable, "-m", "vramscope", "analyze", str(BASE), "--json", str(out)], check=True,
                       capture_output=True)
        good = json.loads(out.read_text())
    for run in [good, *good.get("runs", [])]:  # timings differ run to run: keep the corpus stable
        run.update({k: 0 for k in run if k.endswith("_seconds")})
    put("findings_good.json", json.dumps(good).encode(), "report-ok", "analyze --json output")
    evil = copy.deepcopy(good)
    evil["source"] = "<!--<script>"
    evil["leaks"][0]["site"]["function"] = "</script><script>document.body.innerHTML=''</script>"
    evil["notes"].append("\u2028<!--")
    put("findings_hostile_strings.json", json.dumps(evil, ensure_ascii=False).encode(), "report-ok", "strings that end or hide scripts")
    put("findings_root_list.json", b"[]", "report-error", "root a list")
    put("findings_root_number.json", b"42", "report-error", "root a number")
    put("findings_runs_null.json", b'{"runs": null}', "report-error", '"runs" null')
    put("findings_runs_ints.json", b'{"runs": [1, 2]}', "report-error", "runs of numbers")
    put("findings_ranks_string.json", json.dumps(dict(good, ranks="x")).encode(), "report-error", '"ranks" a string')
    put("findings_deep.json", b"[" * 100_000, "report-error", "nested 100,000 deep")
    put("findings_cut.json", json.dumps(good).encode()[:500], "report-error", "cut short")
    put("findings_not_json.json", b"\x00\x01garbage", "report-error", "not JSON")
    put("findings_huge_number.json", b'{"verdict": "leak", "leak_bytes_per_step": 1e999999}', "report-ok",
        "a run missing most fields: drawn with a note")
    put("findings_wrong_field_types.json", json.dumps({"runs": [{"verdict": 3, "source": [], "leaks": "x", "devices": 5,
                                                                 "notes": 7, "meta": None}]}).encode(),
        "report-ok", "every field of the wrong type: the page says the run could not be drawn")


def matrices() -> None:
    """Matrices a careless user or an attacker writes: names that would spell or leave a path
    (mode `..` with variant `..` once removed the parent of OUT), numbers that never fire or wrap,
    strings a process cannot take, values of the wrong type."""
    def matrix(name: str, body: str, says: str, why: str) -> None:
        put(f"matrix_{name}.toml", f'command = "python -c pass"\n{body}\n'.encode(), "matrix-error", why, says=says)

    env = '\nenv = { A = "1" }'
    for name, key, why in (("mode_dotdot", '[modes.".."]\nargs = "x"\n[variants.".."]' + env, "mode and variant '..'"),
                           ("variant_dot", '[variants."."]' + env, "variant '.': the baseline's folder's parent"),
                           ("variant_slash", '[variants."a/../../b"]' + env, "a name that is a path"),
                           ("variant_backslash", '[variants."a\\\\b"]' + env, "a backslash"),
                           ("variant_dash", '[variants."-rf"]' + env, "a leading '-'"),
                           ("variant_escape", '[variants."a\\u001b[2J"]' + env, "a terminal escape"),
                           ("variant_nul", '[variants."a\\u0000b"]' + env, "a NUL byte"),
                           ("variant_empty", '[variants.""]' + env, "an empty name"),
                           ("variant_long", f'[variants.{"a" * 65}]' + env, "65 characters"),
                           ("variant_unicode", '[variants."\u0663"]' + env, "a non-ASCII digit"),
                           ("variant_baseline", '[variants.Baseline]' + env, "the baseline's folder on a case-insensitive filesystem")):
        matrix(name, key, "cannot name a row or mode", why)
    matrix("variant_case_twins", "[variants.fix]" + env + "\n[variants.FIX]" + env, "differ only in case",
           "two variants one folder on a case-insensitive filesystem")
    for name, value, why in (("nan", "nan", "never fires"), ("inf", "inf", "never fires"), ("true", "true", "not 1 s"),
                             ("nan_string", '"nan"', "never fires"), ("overflow", '"1e999s"', "never fires"),
                             ("negative", "-5", "before it starts"), ("superscript", '"\u00b2"', "not a digit")):
        matrix(f"timeout_{name}", f"timeout = {value}", "timeout", f"timeout = {value}: {why}")
    for name, value, why in (("true", "true", "a bool"), ("superscript", '"\u00b2"', "'²'.isdigit() is true"),
                             ("huge", "9223372036854775807", "past 2^32"), ("fraction", "1.5", "a fraction")):
        matrix(f"steps_{name}", f"steps = {value}", "steps", f"steps = {value}: {why}")
    matrix("device_memory_overflow", 'device_memory = "99999999999999999999999 TB"', "device_memory",
           "past 2^64 bytes: once 0 B")
    matrix("device_memory_bool", "device_memory = true", "device_memory", "a bool")
    for name, body, says, why in (
            ("env_nul", '[variants.p]\nenv = { A = "x\\u0000y" }', "variants.p.env", "NUL in an environment value"),
            ("env_key_equals", '[variants.p]\nenv = { "A=B" = "1" }', "variants.p.env", "'=' in an environment name"),
            ("args_unclosed_quote", "[variants.p]\nargs = \"--x 'unclosed\"", "variants.p.args", "shlex: no closing quotation"),
            ("args_numbers", "[variants.p]\nargs = [1, 2]", "variants.p.args", "arguments of the wrong type"),
            ("tree_number", "[variants.p]\ntree = 5" + env, "variants.p.tree", "a tree of the wrong type"),
            ("label_list", "[variants.p]\nlabel = [1]" + env, "variants.p.label", "a label of the wrong type"),
            ("ref_option", '[variants.p]\nref = "--output=/tmp/owned"', "variants.p.ref", "a ref git would read as an option"),
            ("modes_list", "modes = [1, 2]", "modes", "modes not tables"),
            ("project_number", "project = 7", "project", "a project of the wrong type")):
        matrix(name, body, says, why)
    put("matrix_command_nul.toml", b'command = ["python", "a\\u0000b"]\n', "matrix-error", "NUL in the command",
        says="command")
    put("matrix_not_toml.toml", b"\x00\x01\xff[[[", "matrix-error", "binary junk", says="not TOML")
    put("matrix_deep.toml", b"a = " + b"[" * 100_000 + b"]" * 100_000, "matrix-error", "nested 100,000 deep",
        says="not TOML")


def compare_results() -> None:
    """compare.json files (as `vramscope compare` writes them, then damaged) and the cell findings they
    name: a status is measured from finite rates or not given; a cell vramscope failed on is broken."""
    def cell(name: str, findings: dict) -> None:
        put(f"cell_{name}.json", json.dumps(findings).encode(), "cell", f"cell findings: {name.replace('_', ' ')}")

    cell("no_leak", {"verdict": "no-leak", "leak_bytes_per_step": 0})
    cell("leak_negative_rate", {"verdict": "leak", "leak_bytes_per_step": -5e6})
    cell("leak_without_rate", {"verdict": "leak"})
    cell("leak_rate_a_string", {"verdict": "leak", "leak_bytes_per_step": "nan"})
    cell("leak_steps_huge", {"verdict": "leak", "leak_bytes_per_step": 1e6, "steps": {"count": 1e26}})

    def results(name: str, cells: dict, outcome: str, why: str, top=None, **more) -> None:
        run = {"schema": "vramscope.compare", "schema_version": 1, "command": ["python", "train.py"], "steps": 30,
               "complete": True, "wall_seconds": 1.0, "modes": ["default"],
               "rows": [{"name": row, "label": "", "changes": []} for row in cells],
               "cells": [{"mode": "default", "variant": row, "rc": 0, "wall_seconds": 1.0, "trees": {},
                          "state": "finished", **c} for row, c in cells.items()], **(top or {})}
        put(f"compare_{name}.json", json.dumps(run).encode(), outcome, why, **more)

    good, clean = {"findings": "findings_good.json"}, {"findings": "cell_no_leak.json"}
    results("baseline_rate_inf", {"baseline": {"findings": "findings_huge_number.json"}, "fix": clean}, "table-ok",
            "the baseline's rate is 1e999999: no status from it", statuses={"fix": "unknown"})
    for name in ("leak_negative_rate", "leak_without_rate", "leak_rate_a_string", "leak_steps_huge"):
        results(name, {"baseline": good, "fix": {"findings": f"cell_{name}.json"}}, "table-ok",
                f"a row whose findings say LEAK with {name.replace('_', ' ')}", statuses={"fix": "unknown"})
    results("findings_missing", {"baseline": good, "fix": {"findings": "cell_not_there.json"}}, "table-ok",
            "a row's findings gone: that row unknown, the table still drawn", statuses={"fix": "unknown"})
    results("cell_error", {"baseline": good, "fix": {"state": "error", "rc": None,
                                                    "reason": "vramscope could not run this cell: OSError: x"}},
            "table-ok", "a cell vramscope failed on", statuses={"fix": "broken"})
    results("steps_huge", {"baseline": good}, "table-error", "steps = 1e26 (once INT64_MIN)", top={"steps": 1e26},
            says="steps")
    results("rc_huge", {"baseline": {**good, "rc": 1e300}}, "table-error", "an exit code of 1e300", says="cells.rc")
    results("state_running", {"baseline": {**good, "state": "running"}}, "table-error", "a cell left running",
            says="unknown cell state")
    run = json.loads((HERE / "compare_cell_error.json").read_text())
    run["cells"].append(run["cells"][0])
    put("compare_duplicate_cell.json", json.dumps(run).encode(), "table-error", "one cell twice", says="two cells")


# .vscope records written by hand (trace/format.h), for traces the writer would never make.
def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not out[-1] & 0x80:
            return bytes(out)


def vscope(records: bytes, events: int) -> bytes:
    """A version-2 trace: the records in one chunk, then the end record counting `events`."""
    seq = lambda n: b"\x18" + varint(n)  # noqa: E731  tag_chunk_seq
    return b"\x89VSCOPE\n\x02\x00\x00\x00" + chunk(seq(0) + records) + chunk(seq(1) + b"\x19" + varint(events))


STRING, FRAME, STACK, CONTEXT, DEVICE, STEP_SAME_TIME = 18, 19, 20, 21, 17, 8 | 0x20
ALLOC, FREE = 0, 13


def alloc(time_delta: int, stack: int, size: int, addr_delta: int) -> bytes:
    """An alloc record: time, stack, size and address (both in 512-byte units), unguessed."""
    return bytes([ALLOC]) + varint(time_delta * 2) + varint(stack) + varint(size) + varint(zigzag(addr_delta))


def zigzag(n: int) -> int:
    return n * 2 if n >= 0 else -n * 2 - 1


def free(time_delta: int, size: int, addr_delta: int) -> bytes:
    return bytes([FREE]) + varint(time_delta * 2) + varint(zigzag(addr_delta)) + varint(size)


def sites(count: int) -> bytes:
    """`count` strings, frames and one-frame stacks (ids 1..count): as many allocation sites."""
    out = bytearray()
    for k in range(1, count + 1):
        name = f"s{k}.py".encode()
        out += bytes([STRING]) + varint(0) + varint(len(name)) + name
        out += bytes([FRAME]) + varint(k) + varint(k) + varint(1) + bytes([STACK]) + varint(0) + varint(k)
    return bytes(out)


def deep_stack_sites(depth: int, leaves: int, steps: int) -> bytes:
    """A chain of `depth` frames, then `leaves` stacks on its end, each with a frame of its own (a
    site each); one allocation per leaf, spread over `steps` step markers."""
    recs = bytearray(bytes([STRING]) + varint(0) + varint(4) + b"a.py")
    for k in range(1, depth + 1):  # frame k: a.py line k; stack k: its parent k - 1
        recs += bytes([FRAME]) + varint(1) + varint(1) + varint(k) + bytes([STACK]) + varint(k - 1) + varint(k)
    for j in range(1, leaves + 1):
        recs += bytes([FRAME]) + varint(1) + varint(1) + varint(depth + j) + bytes([STACK]) + varint(depth) + varint(depth + j)
    recs += bytes([CONTEXT]) + b"\0\0\0"
    events = 0
    for step in range(steps):
        for j in range(step * leaves // steps, (step + 1) * leaves // steps):
            recs += alloc(1, depth + 1 + j, 1, 1)
            events += 1
        recs += bytes([STEP_SAME_TIME, 0])
        events += 1
    return vscope(bytes(recs), events)


def amplifiers() -> None:
    """Inputs under 1 MB that once took gigabytes or minutes (issue 21, class 3/4): each must end in
    an error naming the limit that stopped it, or in a result within the test's time and memory."""
    # Each string the whole previous one plus a byte: 150,000 records of 6 bytes, 11 GB of strings.
    grow = b"".join(bytes([STRING]) + varint(k << 3) + b"\x01a" for k in range(150_000))
    put("strings_front_coded.vscope", vscope(grow, 0), "error",
        "each string the previous one plus a byte: 11 GB of strings from 0.9 MB (--max-memory)")
    # 256 devices, then 400,000 step markers of 2 bytes: a timeline point per device per step (5.7 GB).
    devices = b"".join(bytes([DEVICE]) + varint(d) + varint(80 << 30) + b"\0\0" for d in range(256))
    one_alloc = sites(1) + bytes([CONTEXT]) + b"\0\0\0" + alloc(1, 1, 1, 1)
    put("devices_times_steps.vscope", vscope(devices + one_alloc + bytes([STEP_SAME_TIME, 0]) * 400_000, 400_001),
        "over-limit", "256 devices x 400,000 step markers: 5.7 GB of timelines from 0.8 MB")
    # Many sites over many steps (once 205 s of CPU): 3,000 sites, each judged on its one survivor,
    # over 10,000 steps; and 3,000 sites at the end of a 4,000-frame stack.
    spread = bytearray(sites(3000) + bytes([CONTEXT]) + b"\0\0\0")
    for step in range(10_000):
        if 1 <= step - 10 <= 3000:
            spread += alloc(1, step - 10, 1, 1)
        spread += bytes([STEP_SAME_TIME, 0])
    put("sites_times_steps.vscope", vscope(bytes(spread), 13_000), "judged",
        "3,000 sites judged over 10,000 steps: sites x steps of work, bounded by the file")
    put("deep_stack_sites.vscope", deep_stack_sites(4000, 3000, 40), "judged",
        "3,000 sites under one 4,000-frame stack: each stack's frames walked once")
    # Under --max-memory 256MiB: the analysis and its findings JSON fit (256 x 2,000 timeline points),
    # its Perfetto export once sampled every device at every step end (test_hostile.cpp counts them).
    put("perfetto_devices_times_steps.vscope", vscope(devices + one_alloc + bytes([STEP_SAME_TIME, 0]) * 2_000, 2_001),
        "judged", "256 devices x 2,000 step markers: a Perfetto sample per device that changed, not per device")
    # Pickle's memo: one list of 2,650 blocks referenced by each of 2,650 segments (a memo
    # reference each, 2 bytes): 7 M live blocks, 280 MB, from 11 KB.
    frames = [{"filename": "loop.py", "name": "step", "line": 1}]
    block = {"size": 512, "requested_size": 512, "address": 0, "state": "active_allocated", "frames": frames}
    segment = {"device": 0, "address": 0, "total_size": 1 << 20, "stream": 0, "blocks": [block] * 2650}
    put("segments_times_blocks_memo.pickle", pickle.dumps({"segments": [segment] * 2650, "device_traces": [[]]}, protocol=4),
        "error", "2,650 memo references to a segment holding 2,650 memo references to a block: 7 M blocks (--max-memory)")
    entry = {"action": "alloc", "addr": 512, "size": 512, "stream": 0, "time_us": 1, "frames": frames}
    # The snapshot's form of devices x steps: an allocation on each of 256 devices, then one
    # optimizer step's two annotations referenced 80,000 times (pickle's memo): a timeline point
    # per device per step, 1.8 GB, from 2 KB.
    step = [{"name": "Optimizer.step#Adam.step", "stage": stage, "device": 0, "time_us": 2} for stage in ("START", "END")]
    traces = [[{**entry, "time_us": 1}] for _ in range(256)]
    put("devices_times_steps.pickle.gz", gz(pickle.dumps({"segments": [], "device_traces": traces,
                                                         "external_annotations": step * 80_000}, protocol=4)),
        "over-limit", "256 devices x 80,000 optimizer steps (memo references to two annotations): 1.8 GB of timelines from 2 KB")
    # The device number that is device 0 once cut to 8 or 16 bits, and a capacity of 1 byte.
    put("device_256.vscope", vscope(bytes([DEVICE]) + varint(256) + varint(1 << 30) + b"\0\0" + one_alloc, 1),
        "cannot-judge", "device 256: device 0 once cut to 8 bits")
    put("device_65536.pickle", pickle.dumps({"segments": [{"device": 65536, "address": 0, "total_size": 1 << 20,
                                                           "stream": 0, "blocks": []}],
                                             "device_traces": [[entry]]}, protocol=4),
        "cannot-judge", "a segment on device 65536: device 0 once cut to 16 bits")
    tiny = bytes([DEVICE]) + b"\0\x01\0\0"
    put("capacity_1_byte.vscope", vscope(tiny + one_alloc, 1), "cannot-judge",
        "a capacity of 1 byte, below the 512 bytes the trace itself allocates")


PARTS = [hand_pickles, schema_damage, stream_damage, vscope_damage, findings_json, matrices, compare_results, amplifiers]


def main() -> None:
    """Every part, or the parts named (`make_corpus.py amplifiers`): those files remade, the rest kept."""
    chosen = [p for p in PARTS if p.__name__ in sys.argv[1:]] or PARTS
    if chosen == PARTS:
        for f in HERE.iterdir():
            if f.name not in ("make_corpus.py", "README.md"):
                f.unlink()
    else:
        EXPECT.update(json.loads((HERE / "expectations.json").read_text()))
    for part in chosen:
        part()
    (HERE / "expectations.json").write_text(json.dumps(dict(sorted(EXPECT.items())), indent=1) + "\n")
    total = sum((HERE / n).stat().st_size for n in EXPECT)
    print(f"{len(EXPECT)} files, {total:,} bytes")


if __name__ == "__main__":
    main()
