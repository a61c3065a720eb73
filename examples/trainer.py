#!/usr/bin/env python3
"""A torch trainer that refits its model to rollout nodes after every
optimizer step, with the installed deltacast module:
Sender.from_state_dict over the model's bf16 inference copy.

    trainer.py TOPOLOGY VERSIONS STATE_DIR [OUT]

TOPOLOGY: local:N:PORT (this process and N rollout nodes on 127.0.0.1) or
a topology file; this process is node 0.  Needs the job secret
(DELTACAST_SECRET_FILE).  Trains a small language model with AdamW in
float32 and keeps a bfloat16 copy of its weights (what a rollout engine
serves); each step updates that copy in place (copy_) and push() refits
it, returning once every rollout node committed the version.  OUT: the
final bf16 weights, raw, in the canonical order, and OUT.vN those of
version N (rollout.py writes the same from its side; the files must be
equal).
"""
import sys

import torch

import deltacast as dc

VOCAB, DIM = 512, 64


def build_model():
    """The model both sides build: the same seed, the same version 0 (the
    checkpoint every node loaded)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Embedding(VOCAB, DIM),
        torch.nn.Linear(DIM, 4 * DIM), torch.nn.GELU(), torch.nn.Linear(4 * DIM, DIM),
        torch.nn.LayerNorm(DIM),
        torch.nn.Linear(DIM, VOCAB))


def weights_bytes(sd) -> bytes:
    """The state dict's bytes in canonical order (deltacast.layout())."""
    out = bytearray()
    for name, _, _ in dc.layout(sd):
        out += sd[name].contiguous().view(torch.uint8).numpy().tobytes()
    return bytes(out)


def topology(arg):
    if arg.startswith("local:"):
        _, n, port = arg.split(":")
        return dc.Topology.local(1, int(n), int(port))
    return dc.Topology.load(arg)


def main(argv):
    if len(argv) not in (4, 5):
        print("usage: " + __doc__.strip().splitlines()[4].strip(), file=sys.stderr)
        return 2
    topo, versions, state_dir = topology(argv[1]), int(argv[2]), argv[3]
    print(f"trainer.py: deltacast {dc.version()} from {dc.library_path()[0]}, "
          f"torch {torch.__version__}")
    model = build_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    # the rollout copy: bf16, contiguous, updated in place after each step
    infer = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    print(f"trainer.py: layout {dc.layout_fingerprint(infer)} ({len(infer)} tensors)")
    data = torch.Generator().manual_seed(1)
    with dc.Sender.from_state_dict(infer, topo, state_dir, wait_ms=60000) as sender:
        for v in range(1, versions + 1):
            tokens = torch.randint(0, VOCAB, (8, 33), generator=data)
            logits = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB),
                                                     tokens[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                for k, p in model.state_dict().items():
                    infer[k].copy_(p)  # in place: the sender reads this memory
            st = sender.push()
            print(f"trainer.py: step {v} loss {loss.item():.4f}: version {st['version']} "
                  f"committed: {st['payload_bytes']} payload bytes for {st['dense_bytes']}, "
                  f"{st['seconds']:.3f} s")
            if len(argv) == 5:
                with open(f"{argv[4]}.v{v}", "wb") as f:
                    f.write(weights_bytes(infer))
    if len(argv) == 5:
        with open(argv[4], "wb") as f:
            f.write(weights_bytes(infer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
