#!/usr/bin/env python3
"""A torch rollout node: its model's weights (bf16, in the model's own
memory) are refit in place by trainer.py, with the installed deltacast
module.

    rollout.py TOPOLOGY RANK STATE_DIR [OUT]

TOPOLOGY as given to trainer.py; RANK 1..N ("auto": the launcher's, from
OMPI_COMM_WORLD_RANK or SLURM_PROCID); %r in STATE_DIR and OUT is replaced
by the rank.  The node starts on version 0 (build_model(): the checkpoint
every node loaded) and deltacast.run_node() applies each version to the
model's tensors, through deltacast.placement(model.state_dict()), until the
trainer ends the job; then it "generates" with the refit weights and
writes them to OUT (raw, canonical order: equal to trainer.py's OUT).

run_node() blocks for the whole job and writes the weights while a version
is applied, so generation here runs after the job; a rollout engine that
generates between versions uses a receiver handle (hold a version, swap,
release) where its library has one.
"""
import os
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


def main(argv):
    if len(argv) not in (4, 5):
        print("usage: " + __doc__.strip().splitlines()[4].strip(), file=sys.stderr)
        return 2
    topo, rank = topology(argv[1]), rank_of(argv[2])
    state_dir = argv[3].replace("%r", str(rank))
    model = build_model().to(torch.bfloat16).eval()
    sd = model.state_dict()  # shares the parameters' memory: refit in place
    tensors, segments, memory = dc.placement(sd)
    print(f"rollout.py {rank}: layout {dc.layout_fingerprint(sd)} ({len(tensors)} tensors, "
          f"{memory} memory)")
    dc.run_node(topo, rank, state_dir, tensors=tensors, segments=segments, memory=memory,
                wait_ms=60000)
    version, _, _ = dc.refit_committed(state_dir)
    with torch.no_grad():  # "generation": greedy, a few tokens
        seq = torch.tensor([[1]])
        for _ in range(8):
            nxt = model(seq)[:, -1].float().argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], 1)
    print(f"rollout.py {rank}: holds version {version}; generated {seq[0].tolist()}")
    if len(argv) == 5:
        with open(argv[4].replace("%r", str(rank)), "wb") as f:
            f.write(weights_bytes(sd))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
