"""Writes a synthetic torch memory snapshot (what torch.cuda.memory._dump_snapshot writes: a dict
of plain lists, dicts, strings and ints), for the import figures when no recorded one is at hand:
    python bench/make_snapshot.py OUT.pickle --entries 1000000 [--frames 5] [--protocol 4] [--gzip]
A training loop of 40 allocation sites (5-frame Python stacks, as stacks="python" records them),
each block freed within its step, one site leaking 64 KiB a step (frame dicts shared, a list per
allocation, as torch writes them); entries carry the fields torch
writes (action, addr, size, stream, time_us, frames, compile_context, user_metadata).
"""
import argparse
import gzip
import pickle

MiB = 1 << 20


FRAMES = 5  # per stack; deeper stacks make bigger files (--frames)


def frames_for(site, cache={}):
    # As torch writes them: frame dicts shared by every entry (memo references), a new list per
    # allocation, which its frees share.
    if site not in cache:
        cache[site] = _frames(site)
    return list(cache[site])


def _frames(site):
    callers = [{"filename": f"/home/u/lib/layer_{k}.py", "line": 20 + k, "name": f"call_{k}"} for k in range(FRAMES - 5)]
    return callers + [
        {"filename": "/usr/lib/python3.12/site-packages/torch/nn/modules/linear.py", "line": 125, "name": "forward"},
        {"filename": f"/home/u/model_{site % 8}.py", "line": 10 + site, "name": f"block_{site}"},
        {"filename": "/home/u/model.py", "line": 88, "name": "forward"},
        {"filename": "/home/u/train.py", "line": 41, "name": "train_step"},
        {"filename": "/home/u/train.py", "line": 70, "name": "<module>"},
    ]


def snapshot(entries):
    trace, time, step = [], 1_700_000_000_000_000, 0
    sites = 40
    while len(trace) < entries:
        for site in range(sites):
            addr, size = 0x7F0000000000 + site * 4 * MiB, (site % 16 + 1) * 65536
            frames = frames_for(site)
            for action in ("alloc", "free_requested", "free_completed"):
                time += 3
                trace.append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": time,
                              "frames": frames, "compile_context": "N/A", "user_metadata": ""})
        time += 3
        trace.append({"action": "alloc", "addr": 0x7F8000000000 + step * 65536, "size": 65536, "stream": 0,
                      "time_us": time, "frames": frames_for(99), "compile_context": "N/A", "user_metadata": ""})
        step += 1
    return {"segments": [], "device_traces": [trace[:entries]], "allocator_settings": {}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--protocol", type=int, default=pickle.DEFAULT_PROTOCOL)
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("--frames", type=int, default=5)
    a = ap.parse_args()
    global FRAMES
    FRAMES = max(5, a.frames)
    data = pickle.dumps(snapshot(a.entries), protocol=a.protocol)
    with (gzip.open(a.out, "wb", compresslevel=6) if a.gzip else open(a.out, "wb")) as f:
        f.write(data)
    print(f"wrote {a.out}: {a.entries} entries, protocol {a.protocol}, {len(data)} bytes uncompressed")


if __name__ == "__main__":
    main()
