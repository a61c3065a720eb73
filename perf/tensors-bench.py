#!/usr/bin/python3
"""The cost of the Python tensor helpers over the codec they call:
deltacast.diff_tensors / apply_tensors on a torch state dict against
diff_bytes / apply_bytes on the same checkpoint as ready-made safetensors
images (the baseline, measured in the same run), and diff_buffer on one
flat buffer.  Medians of --runs runs; every applied state dict is checked
bit for bit against the target.

    DELTACAST_LIB=build/libdeltacast.so perf/tensors-bench.py [--mib 32] [--tensors 8]
        [--change 0.01] [--runs 5]

(or with the installed module: no DELTACAST_LIB).  Needs torch.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import torch  # noqa: E402

import deltacast as dc  # noqa: E402


def timed(fn, runs):
    out, secs = None, []
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        secs.append(time.perf_counter() - t)
    return out, statistics.median(secs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=32, help="checkpoint size (bf16), MiB")
    ap.add_argument("--tensors", type=int, default=8)
    ap.add_argument("--change", type=float, default=0.01, help="fraction of elements changed")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    g = torch.Generator().manual_seed(0)
    per = a.mib * (1 << 20) // 2 // a.tensors
    base = {f"layer{i}.weight": torch.randn(per, generator=g).to(torch.bfloat16)
            for i in range(a.tensors)}
    nxt = {k: v.clone() for k, v in base.items()}
    for v in nxt.values():
        idx = torch.randint(0, v.numel(), (max(1, int(v.numel() * a.change)),), generator=g)
        v[idx] += 0.01
    bi, ni = dc._st_image(dc._views(base)), dc._st_image(dc._views(nxt))
    bi, ni = bytes(bi), bytes(ni)
    rows = []
    d0, t = timed(lambda: dc.diff_bytes(bi, ni), a.runs)
    rows.append(("diff_bytes (images ready)", t))
    d1, t = timed(lambda: dc.diff_tensors(base, nxt), a.runs)
    rows.append(("diff_tensors", t))
    _, t = timed(lambda: dc.apply_bytes(bi, d0), a.runs)
    rows.append(("apply_bytes (images ready)", t))
    secs = []
    for _ in range(a.runs):
        tgt = {k: v.clone() for k, v in base.items()}
        t0 = time.perf_counter()
        dc.apply_tensors(tgt, d1)
        secs.append(time.perf_counter() - t0)
        for k in base:
            if not torch.equal(tgt[k].view(torch.int16), nxt[k].view(torch.int16)):
                sys.exit(f"tensors-bench: {k} differs from the target after apply_tensors")
    rows.append(("apply_tensors", statistics.median(secs)))
    flat_b = torch.cat([v.view(-1) for v in base.values()])
    flat_n = torch.cat([v.view(-1) for v in nxt.values()])
    d2, t = timed(lambda: dc.diff_buffer(flat_b, flat_n), a.runs)
    rows.append(("diff_buffer (one flat buffer)", t))
    nbytes = sum(v.numel() * 2 for v in base.values())
    print(f"{nbytes / 2**20:.0f} MiB bf16 in {a.tensors} tensors, {a.change:.2%} changed; "
          f"delta {len(d1)} bytes ({nbytes / len(d1):.1f}x), buffer delta {len(d2)} bytes; "
          f"median of {a.runs} runs")
    print(f"| {'call':<30} | {'s':>7} | {'GB/s':>6} |")
    print(f"|{'-' * 32}|{'-' * 9}|{'-' * 8}|")
    for name, t in rows:
        print(f"| {name:<30} | {t:7.3f} | {nbytes / t / 1e9:6.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
