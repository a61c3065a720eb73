#!/usr/bin/env python3
"""A torch rollout node: its model's weights (bf16, in the model's own
memory) are refit in place by trainer.py, with the installed deltacast
module: deltacast.Receiver.from_state_dict(model.state_dict()).

    rollout.py TOPOLOGY RANK STATE_DIR [OUT]

TOPOLOGY as given to trainer.py; RANK 1..N ("auto": the launcher's, from
OMPI_COMM_WORLD_RANK, PMIX_RANK or SLURM_PROCID); %r in STATE_DIR and OUT
is replaced by the rank.  The node starts on version 0 (build_model(): the
checkpoint every node loaded).  Each time a version is committed it holds
the weights (a version that arrives meanwhile is staged, not written),
"generates" with them, writes them to OUT.vN, and releases; after the job
it writes OUT (raw bytes in canonical order, equal to trainer.py's OUT and
OUT.vN).  Exit status 0 when the job ended well.
"""
import os
import queue
import sys

import torch

import deltacast as dc
from trainer import build_model, topology, weights_bytes


def rank_of(arg):
    if arg != "auto":
        return int(arg)
    for var in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if var in os.environ:
            return int(os.environ[var])
    raise SystemExit("rollout.py: RANK auto, but no OMPI_COMM_WORLD_RANK, PMIX_RANK or "
                     "SLURM_PROCID in the environment")


def generate(model, n=8):
    """Greedy decoding of a few tokens: the rollout engine's work."""
    with torch.no_grad():
        seq = torch.tensor([[1]])
        for _ in range(n):
            nxt = model(seq)[:, -1].float().argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], 1)
    return seq[0].tolist()


def main(argv):
    if len(argv) not in (4, 5):
        print("usage: " + __doc__.strip().splitlines()[4].strip(), file=sys.stderr)
        return 2
    topo, rank = topology(argv[1]), rank_of(argv[2])
    state_dir = argv[3].replace("%r", str(rank))
    out = argv[4].replace("%r", str(rank)) if len(argv) == 5 else None
    model = build_model().to(torch.bfloat16).eval()
    sd = model.state_dict()  # shares the parameters' memory: refit in place
    events = queue.Queue()
    with dc.Receiver.from_state_dict(sd, topo, state_dir, rank=rank) as rx:
        print(f"rollout.py {rank}: layout {dc.layout_fingerprint(rx.layout)} "
              f"({len(rx.layout)} tensors)", flush=True)

        def on_event(ev):  # on the library's thread: return soon
            if ev["type"] == "committed":
                rx.hold()  # takes effect before the node reads on: the weights stay ev's
            events.put(ev)
        rx.on_event(on_event)
        while (ev := rx.wait(0)) is not None:  # any that came before the callback
            if ev["type"] == "committed":
                rx.hold()
            events.put(ev)
        while True:
            try:
                ev = events.get(timeout=600)
            except queue.Empty:
                print(f"rollout.py {rank}: no event in 600 s", file=sys.stderr)
                return 1
            kind, v = ev["type"], ev["version"]
            if kind == "begin":
                print(f"rollout.py {rank}: version {v} begins"
                      + (" (held: staged until release)" if "held" in ev["flags"] else ""),
                      flush=True)
            elif kind == "committed":
                have, _, inflight = rx.version()
                if have != v or inflight:
                    print(f"rollout.py {rank}: holding version {have} (in flight: {inflight}), "
                          f"not the committed {v}", file=sys.stderr)
                    return 1
                tokens = generate(model)  # the weights are version v, and stay it
                print(f"rollout.py {rank}: version {v} committed; generated {tokens}", flush=True)
                if out:
                    with open(f"{out}.v{v}", "wb") as f:
                        f.write(weights_bytes(sd))
                rx.release()  # a version staged meanwhile is applied now
            elif kind == "aborted":
                print(f"rollout.py {rank}: version {v} aborted: {ev['message']}", flush=True)
            elif kind == "ended":
                if ev["status"] != 0:
                    print(f"rollout.py {rank}: the job failed: {ev['message']}", file=sys.stderr)
                    return 1
                break
        version = rx.version()[0]
    print(f"rollout.py {rank}: holds version {version}", flush=True)
    if out:
        with open(out, "wb") as f:
            f.write(weights_bytes(sd))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
