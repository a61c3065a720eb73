#!/usr/bin/env python3
"""A trainer in Python that refits its weights to rollout receivers, with
the installed deltacast module and numpy buffers (the Python twin of
sender.c: the same toy model, byte for byte, so `receiver` checks it).

    sender.py TOPOLOGY VERSIONS STATE_DIR [OUT]

TOPOLOGY: local:N:PORT (this process and N receivers on 127.0.0.1) or a
topology file; this process is node 0.  Needs the job secret
(DELTACAST_SECRET_FILE).  In a real trainer the buffers are the model's
parameters (numpy arrays, or torch CPU tensors through .numpy()) and the
step is optimizer.step(); push() returns once every receiver committed.
"""
import sys

import numpy as np

import deltacast as dc

# name, safetensors dtype, elements, bytes per element (example.h)
LAYOUT = [("embed.weight", "BF16", 256 * 1024, 2),
          ("layer0.weight", "F32", 128 * 1024, 4),
          ("head.bias", "F32", 1000, 4)]
M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def mix(x):
    """example.h's toy_mix on a uint64 array (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xff51afd7ed558ccd)
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xc4ceb9fe1a85ec53)
    return x ^ (x >> np.uint64(33))


def model_v0():
    """One uint8 buffer per tensor, holding version 0."""
    bufs, off = [], 0
    for _, _, n, w in LAYOUT:
        idx = np.arange(off, off + n * w, dtype=np.uint64)
        bufs.append((mix(idx) & np.uint64(0xff)).astype(np.uint8))
        off += n * w
    return bufs


def step(bufs, v):
    """Version v - 1 -> version v in place (example.h's toy_model_step)."""
    for t, ((_, _, n, w), b) in enumerate(zip(LAYOUT, bufs)):
        i = np.arange(n, dtype=np.uint64)
        h = mix((np.uint64(v) << np.uint64(40)) ^ (np.uint64(t) << np.uint64(32)) ^ i)
        hit = (h % np.uint64(64)) == 0
        flip = (np.uint64(1) + (h >> np.uint64(8)) % np.uint64(255)).astype(np.uint8)
        b[np.nonzero(hit)[0] * w] ^= flip[hit]


def topology(arg):
    if arg.startswith("local:"):
        _, n, port = arg.split(":")
        return dc.Topology.local(1, int(n), int(port))
    return dc.Topology.load(arg)


def main(argv):
    if len(argv) not in (4, 5):
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    topo, versions, state_dir = topology(argv[1]), int(argv[2]), argv[3]
    print(f"sender.py: deltacast {dc.version()} from {dc.library_path()[0]}")
    bufs = model_v0()
    tensors = [(name, dtype, n) for name, dtype, n, _ in LAYOUT]
    segments = [(name, 0, b) for (name, _, _, _), b in zip(LAYOUT, bufs)]
    with dc.Sender(topo, state_dir, tensors, segments, wait_ms=60000) as s:
        for v in range(1, versions + 1):
            step(bufs, v)  # the optimizer step, in place
            st = s.push()
            print(f"sender.py: version {st['version']} committed: {st['payload_bytes']} "
                  f"payload bytes for {st['dense_bytes']}, {st['seconds']:.3f} s")
    if len(argv) == 5:
        with open(argv[4], "wb") as f:
            for b in bufs:
                f.write(b.tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
