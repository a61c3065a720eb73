#!/usr/bin/python3
"""Real optimizer-step checkpoints for deltacast's codec measurements.

Trains a small GPT-like byte-level language model for real (AdamW, FP32 master
weights and optimizer state) on text found on this machine: the Python standard
library sources under /usr/lib/python3.X (a sorted, fixed file list), then, from
the same warmed-up state, runs K consecutive optimizer steps at each small
learning rate and writes the published weights (master cast to BF16, and F16 /
F8_E4M3 when asked) after every step as hand-written safetensors files:

    OUT/lr1e-6/step0.safetensors ... stepK.safetensors       (BF16)
    OUT/lr1e-6/f16/step0.safetensors ...                      (--dtypes ...,f16)
    OUT/lr1e-6/f8/step0.safetensors ...                       (--dtypes ...,f8: F8_E4M3
                                                               with a F32 NAME_scale_inv)

step0 is the warmed-up state; stepk is after k steps at that lr.  For every
consecutive pair it prints statistics of the change (fraction of values that
changed, change rate per base exponent, distribution of the integer step in
sign-magnitude order).  The warmed-up state is cached in OUT (torch.save) keyed
by every setting that shapes it, so re-runs skip the warm-up.

    --stats A B [A2 B2 ...]   prints the same statistics for any safetensors
                   files (tensors of B matched by name; 16- and 8-bit float
                   tensors counted, others skipped) and exits; several pairs
                   make one side-by-side markdown table (--labels names the
                   columns; --json for all figures).

Timing: ~0.7 s a warm-up step on 2 idle cores (150 steps: 2 minutes), the
measured steps and files about a minute.  Linear layers run as 1x1
convolutions: Debian's torch 1.13 links the reference BLAS (~0.4 GFLOP/s),
while its oneDNN convolutions reach ~14 GFLOP/s on 2 cores.

Run with /usr/bin/python3 (Debian's torch 1.13 CPU and numpy); no network.
Deterministic for a given machine (seeded; fixed thread count).
"""

import argparse
import hashlib
import json
import math
import os
import struct
import sys
import time

import numpy as np

# --------------------------------------------------------------------------------------------
# safetensors, by hand

DT_SIZE = {"BF16": 2, "F16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F32": 4, "F64": 8, "BOOL": 1, "U8": 1,
           "I8": 1, "I16": 2, "U16": 2, "I32": 4, "U32": 4, "I64": 8, "U64": 8}


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype string, shape tuple, bytes); written in list order."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    off = 0
    for name, dtype, shape, data in tensors:
        n = 1
        for d in shape:
            n *= d
        if len(data) != n * DT_SIZE[dtype]:
            raise ValueError("%s: %d bytes for %s %s" % (name, len(data), dtype, shape))
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)  # data region 8-byte aligned (spaces are allowed)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for _, _, _, data in tensors:
            f.write(data)
    os.replace(tmp, path)


def read_safetensors(path):
    """Returns (list of (name, dtype, shape, numpy uint array of raw bit patterns), metadata)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: shorter than the 8-byte header length" % path)
    (hl,) = struct.unpack("<Q", raw[:8])
    if hl > len(raw) - 8:
        raise ValueError("%s: header length %d beyond the file (%d bytes)" % (path, hl, len(raw)))
    try:
        header = json.loads(raw[8 : 8 + hl].decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError("%s: header is not JSON: %s" % (path, e))
    if not isinstance(header, dict):
        raise ValueError("%s: header is not a JSON object" % path)
    meta = header.pop("__metadata__", None)
    data = memoryview(raw)[8 + hl :]
    out = []
    for name, ent in header.items():
        try:
            dtype = ent["dtype"]
            shape = tuple(int(d) for d in ent["shape"])
            b, e = (int(x) for x in ent["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ValueError("%s: tensor %r: malformed entry" % (path, name))
        if dtype not in DT_SIZE:
            raise ValueError("%s: tensor %r: dtype %s not handled" % (path, name, dtype))
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if b < 0 or e < b or e > len(data) or e - b != n * DT_SIZE[dtype]:
            raise ValueError("%s: tensor %r: bad data_offsets [%d, %d]" % (path, name, b, e))
        u = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[DT_SIZE[dtype]]
        out.append((name, dtype, shape, np.frombuffer(data[b:e], dtype="<" + np.dtype(u).str[1:])))
    return out, meta


# --------------------------------------------------------------------------------------------
# conversions of FP32 master weights to published bit patterns


def to_bf16_bits(t):
    import torch

    return t.detach().to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).copy()


def to_f16_bits(t):
    import torch

    return t.detach().to(torch.float16).view(torch.int16).numpy().view(np.uint16).copy()


def _e4m3_table():
    # positive finite E4M3 (OCP "fn": bias 7, no infinities, 0x7F is NaN) codes 0..0x7E
    vals = np.zeros(0x7F, dtype=np.float64)
    for c in range(0x7F):
        e, m = c >> 3, c & 7
        vals[c] = (m / 8.0) * 2.0**-6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
    return vals


_E4M3 = None


def to_f8_e4m3_bits(t):
    """Round to nearest, ties to even, saturating at +-448; NaN -> 0x7F."""
    global _E4M3
    if _E4M3 is None:
        _E4M3 = _e4m3_table()
    x = t.detach().double().numpy().ravel()
    a = np.abs(x)
    hi = np.clip(np.searchsorted(_E4M3, a, side="left"), 0, 0x7E)  # first value >= a
    lo = np.maximum(hi - 1, 0)
    dlo = a - _E4M3[lo]
    dhi = _E4M3[hi] - a
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo)
    code = np.where(a >= _E4M3[0x7E], 0x7E, code)  # saturate (448 and beyond)
    code = code.astype(np.uint8) | np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    code[np.isnan(x)] = 0x7F
    return code


DTYPES = {
    "bf16": ("BF16", to_bf16_bits, ""),
    "f16": ("F16", to_f16_bits, "f16"),
    "f8": ("F8_E4M3", to_f8_e4m3_bits, "f8"),
}

# --------------------------------------------------------------------------------------------
# change statistics


def fmt_info(dtype):
    """(bits, exponent shift, exponent mask, exponent bias) of a float bit pattern."""
    return {
        "BF16": (16, 7, 0xFF, 127),
        "F16": (16, 10, 0x1F, 15),
        "F8_E4M3": (8, 3, 0xF, 7),
        "F8_E5M2": (8, 2, 0x1F, 15),
    }[dtype]


def order_key(b, bits):
    """Sign-magnitude order: key(b) = ~b if the sign bit is set else b | sign bit."""
    b = b.astype(np.int64)
    sign = 1 << (bits - 1)
    full = (1 << bits) - 1
    return np.where(b & sign, b ^ full, b | sign)


STEP_BINS = [(1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 256), (257, 1 << 40)]


def step_label(lo, hi):
    if lo == hi:
        return str(lo)
    if hi >= 1 << 40:
        return ">%d" % (lo - 1)
    return "%d-%d" % (lo, hi)


def pair_stats(base, nxt):
    """base, nxt: lists from read_safetensors (or the same shape built in memory)."""
    by = {n: (d, s, a) for n, d, s, a in nxt}
    total = changed = 0
    exp_n = {}
    exp_c = {}
    steps = []
    per_tensor = []
    dtype0 = None
    for name, dtype, shape, a in base:
        if name not in by:
            raise ValueError("tensor %r missing from the second file" % name)
        d2, s2, b = by[name]
        if d2 != dtype or s2 != shape:
            raise ValueError("tensor %r: %s %s vs %s %s" % (name, dtype, shape, d2, s2))
        if dtype not in ("BF16", "F16", "F8_E4M3", "F8_E5M2"):
            continue
        if dtype0 is None:
            dtype0 = dtype
        bits, sh, em, bias = fmt_info(dtype)
        ch = a != b
        nc = int(ch.sum())
        total += a.size
        changed += nc
        per_tensor.append((name, a.size, nc))
        e = ((a.astype(np.int64) >> sh) & em) - bias
        ue, cnt = np.unique(e, return_counts=True)
        for x, c in zip(ue.tolist(), cnt.tolist()):
            exp_n[x] = exp_n.get(x, 0) + c
        ue, cnt = np.unique(e[ch], return_counts=True)
        for x, c in zip(ue.tolist(), cnt.tolist()):
            exp_c[x] = exp_c.get(x, 0) + c
        if nc:
            steps.append(order_key(b[ch], bits) - order_key(a[ch], bits))
    st = np.concatenate(steps) if steps else np.zeros(0, dtype=np.int64)
    hist = []
    for lo, hi in STEP_BINS:
        m = np.abs(st)
        sel = (m >= lo) & (m <= hi)
        hist.append(
            {
                "step": step_label(lo, hi),
                "share": float(sel.sum()) / max(1, st.size),
                "pos": float((sel & (st > 0)).sum()) / max(1, st.size),
            }
        )
    return {
        "dtype": dtype0,
        "values": total,
        "changed": changed,
        "rate": changed / max(1, total),
        "by_exponent": [
            {"exp": x, "values": exp_n[x], "changed": exp_c.get(x, 0),
             "rate": exp_c.get(x, 0) / exp_n[x]}
            for x in sorted(exp_n)
        ],
        "steps": hist,
        "pm1_share": float((np.abs(st) == 1).sum()) / max(1, st.size),
        "pos_share": float((st > 0).sum()) / max(1, st.size),
        "mean_abs_step": float(np.abs(st).mean()) if st.size else 0.0,
        "tensors": [{"name": n, "values": v, "changed": c} for n, v, c in per_tensor],
    }


def print_stats(label, s, min_share=0.001, out=sys.stdout):
    p = lambda *a: print(*a, file=out)
    p("%s: %s, %d values, %d changed = %.3f%%; +-1 steps %.1f%% of changes, "
      "positive %.1f%%, mean |step| %.2f"
      % (label, s["dtype"], s["values"], s["changed"], 100 * s["rate"], 100 * s["pm1_share"],
         100 * s["pos_share"], s["mean_abs_step"]))
    p("  change rate by base exponent (buckets holding >= %.1f%% of the values):" % (100 * min_share))
    p("    %6s %8s %9s %9s" % ("exp", "values%", "changed%", "rate%"))
    tot, ch = max(1, s["values"]), max(1, s["changed"])
    rest_n = rest_c = 0
    for r in s["by_exponent"]:
        if r["values"] / tot < min_share:
            rest_n += r["values"]
            rest_c += r["changed"]
            continue
        p("    %6d %8.2f %9.2f %9.3f" % (r["exp"], 100 * r["values"] / tot, 100 * r["changed"] / ch,
                                         100 * r["rate"]))
    if rest_n:
        p("    %6s %8.2f %9.2f %9.3f" % ("other", 100 * rest_n / tot, 100 * rest_c / ch,
                                         100 * rest_c / rest_n))
    p("  integer step |key(next)-key(base)| among changed values:")
    p("    " + "  ".join("%s:%.2f%%" % (h["step"], 100 * h["share"]) for h in s["steps"]))


def print_side_by_side(labels, res, min_share=0.001):
    """The statistics of several pairs as one table (markdown), a column per pair."""
    w = max(10, max(len(x) for x in labels))
    row = lambda name, cells: print("| %-26s | " % name + " | ".join("%*s" % (w, c) for c in cells) + " |")
    row("statistic", labels)
    print("|" + "-" * 28 + "|" + "|".join("-" * (w + 2) for _ in labels) + "|")
    row("values changed %", ["%.3f" % (100 * r["rate"]) for r in res])
    row("positive steps %", ["%.1f" % (100 * r["pos_share"]) for r in res])
    for i, h in enumerate(res[0]["steps"]):
        row("|step| %s, %% of changes" % h["step"], ["%.2f" % (100 * r["steps"][i]["share"]) for r in res])
    exps = sorted({e["exp"] for r in res for e in r["by_exponent"]
                   if e["values"] / max(1, r["values"]) >= min_share})
    for x in exps:
        cells = []
        for r in res:
            e = {b["exp"]: b for b in r["by_exponent"]}.get(x)
            cells.append("%.2f / %.3f" % (100 * e["values"] / r["values"], 100 * e["rate"]) if e else "-")
        row("exp %d: values%% / rate%%" % x, cells)


# --------------------------------------------------------------------------------------------
# data and model


def corpus(max_bytes, root=None):
    """The concatenated .py sources of the standard library, sorted by relative path."""
    if root is None:
        cands = sorted(d for d in os.listdir("/usr/lib") if d.startswith("python3.")
                       and os.path.isdir(os.path.join("/usr/lib", d)))
        if not cands:
            sys.exit("train-steps: no /usr/lib/python3.X directory for the text corpus (--corpus DIR)")
        root = os.path.join("/usr/lib", cands[-1])
    files = []
    for dp, dns, fns in os.walk(root):
        dns[:] = sorted(d for d in dns if d not in ("site-packages", "dist-packages", "__pycache__"))
        files.extend(os.path.relpath(os.path.join(dp, f), root) for f in fns if f.endswith(".py"))
    files.sort()
    parts, n = [], 0
    for rel in files:
        try:
            with open(os.path.join(root, rel), "rb") as f:
                b = f.read()
        except OSError:
            continue
        parts.append(b)
        n += len(b)
        if n >= max_bytes:
            break
    data = b"".join(parts)[:max_bytes]
    if len(data) < 1 << 16:
        sys.exit("train-steps: corpus under %s is only %d bytes" % (root, len(data)))
    return root, data


def build_model(torch, vocab, d, layers, heads, ctx):
    nn = torch.nn
    F = torch.nn.functional

    class Linear(nn.Module):
        """nn.Linear computed as a 1x1 convolution: Debian's torch 1.13 links the reference
        (netlib) BLAS, about 0.5 GFLOP/s on this machine, while convolutions go through oneDNN
        (about 15 GFLOP/s on 2 cores).  Same parameters, same math."""

        def __init__(self, i, o, bias=True):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(o, i))
            self.bias = nn.Parameter(torch.zeros(o)) if bias else None
            nn.init.normal_(self.weight, 0.0, 0.02)

        def forward(self, x):
            o, i = self.weight.shape
            y = F.conv2d(x.reshape(-1, i, 1, 1), self.weight.view(o, i, 1, 1), self.bias)
            return y.view(*x.shape[:-1], o)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.qkv = Linear(d, 3 * d)
            self.proj = Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc = Linear(d, 4 * d)
            self.out = Linear(4 * d, d)
            self.register_buffer("mask", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)))

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q = q.view(B, T, heads, C // heads).transpose(1, 2)
            k = k.view(B, T, heads, C // heads).transpose(1, 2)
            v = v.view(B, T, heads, C // heads).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // heads))
            att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.proj(y)
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(ctx, d)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.lnf = nn.LayerNorm(d)
            self.head = Linear(d, vocab, bias=False)
            for n, p in self.named_parameters():
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * layers) if n.endswith(("proj.weight", "out.weight")) else 0.02
                    nn.init.normal_(p, 0.0, std)
                elif n.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, idx):
            T = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(T))[None]
            for b in self.blocks:
                x = b(x)
            return self.head(self.lnf(x))

    return GPT()


def make_optimizer(torch, model, lr, wd, beta2):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    nodecay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": wd}, {"params": nodecay, "weight_decay": 0.0}],
        lr=lr, betas=(0.9, beta2), eps=1e-8)


def batch(torch, data, step, bs, ctx, seed):
    g = torch.Generator().manual_seed(seed * 1000003 + step)
    ix = torch.randint(0, data.numel() - ctx - 1, (bs,), generator=g)
    x = torch.stack([data[i : i + ctx] for i in ix.tolist()])
    y = torch.stack([data[i + 1 : i + 1 + ctx] for i in ix.tolist()])
    return x, y


def train_step(torch, model, opt, data, step, a):
    x, y = batch(torch, data, step, a.batch, a.ctx, a.seed)
    logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if a.clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
    opt.step()
    return float(loss)


def f8_scales(model):
    """Per-tensor power-of-two scales for F8_E4M3 (fixed from the warmed-up weights so that
    every step of a run shares them): the largest |w| lands in [224, 448]."""
    sc = {}
    for n, p in model.named_parameters():
        amax = float(p.detach().abs().max())
        sc[n] = 2.0 ** math.ceil(math.log2(amax / 448.0)) if amax > 0 else 1.0
    return sc


def publish(model, dts, scales):
    """{dtype key: list of (name, dtype string, shape, numpy bits)} in named_parameters order.
    F8 files hold beside every tensor NAME a F32 tensor NAME_scale_inv (w = f8 * scale_inv, as
    in DeepSeek-V3's FP8 checkpoints, with one scale per tensor)."""
    out = {}
    for k in dts:
        dname, conv, _ = DTYPES[k]
        lst = []
        for n, p in model.named_parameters():
            if k == "f8":
                lst.append((n, dname, tuple(p.shape), conv(p.detach() / scales[n]).ravel()))
                lst.append((n + "_scale_inv", "F32", (1,),
                            np.array([scales[n]], dtype="<f4").view(np.uint32)))
            else:
                lst.append((n, dname, tuple(p.shape), conv(p).ravel()))
        out[k] = lst
    return out


def save_published(path, pub, meta):
    write_safetensors(path, [(n, d, s, a.tobytes()) for n, d, s, a in pub], meta)


def lr_dirname(lr):
    """lr1e-6, lr3e-5, lr0.00025 (exponent without zero padding)."""
    if lr == float("%.0e" % lr):
        m, e = ("%.0e" % lr).split("e")
        return "lr%se%d" % (m, int(e))
    return "lr%g" % lr


# --------------------------------------------------------------------------------------------


def main():
    class Fmt(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
        pass

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=Fmt)
    ap.add_argument("--out", default="train-steps-out", help="output directory (also holds the warm-up cache)")
    ap.add_argument("--stats", nargs="+", metavar="FILE",
                    help="only print change statistics for BASE NEXT [BASE2 NEXT2 ...] "
                         "(safetensors files; several pairs: side by side) and exit")
    ap.add_argument("--labels", default=None, help="with --stats: comma list of column labels")
    ap.add_argument("--json", action="store_true", help="with --stats: print the statistics as JSON")
    ap.add_argument("--d-model", type=int, default=256, help="model width (params ~ 12*layers*d^2)")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=64, help="context length (bytes)")
    ap.add_argument("--batch", type=int, default=8, help="sequences per step")
    ap.add_argument("--corpus-mb", type=float, default=8.0, help="bytes of text to use (MiB)")
    ap.add_argument("--corpus", default=None, help="directory of .py text (default: newest /usr/lib/python3.X)")
    ap.add_argument("--warmup-steps", type=int, default=150, help="training steps at --lr before the measured steps")
    ap.add_argument("--lr", type=float, default=1e-3, help="peak lr of the warm-up (linear ramp over its first 10%%, then cosine to lr/10)")
    ap.add_argument("--wd", type=float, default=0.01, help="AdamW weight decay (2-D weights only)")
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--clip", type=float, default=1.0, help="gradient norm clip (0: off)")
    ap.add_argument("--lrs", default="1e-6,1e-5", help="learning rates of the measured steps")
    ap.add_argument("--steps", type=int, default=3, help="K: measured steps per lr (writes step0..stepK)")
    ap.add_argument("--dtypes", default="bf16,f16", help="published dtypes: bf16, f16, f8 (F8_E4M3, round to nearest even, saturating)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (fixed for determinism)")
    a = ap.parse_args()

    if a.stats:
        if len(a.stats) % 2:
            sys.exit("train-steps: --stats takes pairs of files (BASE NEXT ...)")
        pairs = [(a.stats[i], a.stats[i + 1]) for i in range(0, len(a.stats), 2)]
        labels = a.labels.split(",") if a.labels else ["%s->%s" % p for p in pairs]
        if len(labels) != len(pairs):
            sys.exit("train-steps: --labels names %d columns for %d pairs" % (len(labels), len(pairs)))
        res = []
        try:
            for b, n in pairs:
                b0, _ = read_safetensors(b)
                b1, _ = read_safetensors(n)
                res.append(pair_stats(b0, b1))
        except (OSError, ValueError) as e:
            sys.exit("train-steps: %s" % e)
        if a.json:
            json.dump(res[0] if len(res) == 1 else dict(zip(labels, res)), sys.stdout, indent=1)
            print()
        elif len(res) == 1:
            print_stats("%s -> %s" % pairs[0], res[0])
        else:
            print_side_by_side(labels, res)
        return

    dts = [x.strip() for x in a.dtypes.split(",") if x.strip()]
    for x in dts:
        if x not in DTYPES:
            sys.exit("train-steps: unknown dtype '%s' (bf16, f16, f8)" % x)
    lrs = [float(x) for x in a.lrs.split(",") if x.strip()]
    if a.d_model % a.heads:
        sys.exit("train-steps: --d-model must be a multiple of --heads")

    import torch

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    root, text = corpus(int(a.corpus_mb * (1 << 20)), a.corpus)
    data = torch.frombuffer(bytearray(text), dtype=torch.uint8).long()
    os.makedirs(a.out, exist_ok=True)

    shape_keys = ["d_model", "layers", "heads", "ctx", "batch", "warmup_steps", "lr", "wd", "beta2",
                  "clip", "seed", "threads"]
    key = {k: getattr(a, k) for k in shape_keys}
    key["corpus_sha256"] = hashlib.sha256(text).hexdigest()
    key["torch"] = torch.__version__
    kh = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    cache = os.path.join(a.out, "warm-%s.pt" % kh)

    model = build_model(torch, 256, a.d_model, a.layers, a.heads, a.ctx)
    nparams = sum(p.numel() for p in model.parameters())
    print("model: d=%d layers=%d heads=%d ctx=%d: %.2fM parameters; corpus %s (%.1f MiB); %d threads"
          % (a.d_model, a.layers, a.heads, a.ctx, nparams / 1e6, root, len(text) / 2**20, a.threads))
    opt = make_optimizer(torch, model, a.lr, a.wd, a.beta2)

    if os.path.exists(cache):
        st = torch.load(cache)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        print("warm-up: reused %s (loss %.3f after %d steps)" % (cache, st["loss"], a.warmup_steps))
    else:
        t0 = time.time()
        loss = float("nan")
        ramp = max(1, a.warmup_steps // 10)
        for s in range(a.warmup_steps):
            if s < ramp:
                lr = a.lr * (s + 1) / ramp
            else:
                f = (s - ramp) / max(1, a.warmup_steps - ramp)
                lr = a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * f)))
            for g in opt.param_groups:
                g["lr"] = lr
            loss = train_step(torch, model, opt, data, s, a)
            if s % 50 == 0 or s == a.warmup_steps - 1:
                print("  warm-up step %d/%d lr %.2e loss %.3f (%.1fs)"
                      % (s + 1, a.warmup_steps, lr, loss, time.time() - t0), flush=True)
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "loss": loss, "key": key},
                   cache + ".tmp")
        os.replace(cache + ".tmp", cache)
        print("warm-up: %d steps in %.1fs, loss %.3f; saved %s"
              % (a.warmup_steps, time.time() - t0, loss, cache))
    warm = {"model": {k: v.clone() for k, v in model.state_dict().items()},
            "opt": torch.load(cache)["opt"]}

    summary = []
    for lr in lrs:
        model.load_state_dict(warm["model"])
        opt = make_optimizer(torch, model, lr, a.wd, a.beta2)
        opt.load_state_dict(warm["opt"])
        for g in opt.param_groups:
            g["lr"] = lr
        d = os.path.join(a.out, lr_dirname(lr))
        for k in dts:
            os.makedirs(os.path.join(d, DTYPES[k][2]), exist_ok=True)
        scales = f8_scales(model)
        prev = publish(model, dts, scales)
        # the same header in every step's file (as a training run's published checkpoints):
        # the step is in the file name only
        meta = {"producer": "deltacast perf/train-steps.py", "lr": repr(lr), "warmup": kh}
        for k in dts:
            save_published(os.path.join(d, DTYPES[k][2], "step0.safetensors"), prev[k], meta)
        for s in range(1, a.steps + 1):
            loss = train_step(torch, model, opt, data, a.warmup_steps + s - 1, a)
            cur = publish(model, dts, scales)
            for k in dts:
                save_published(os.path.join(d, DTYPES[k][2], "step%d.safetensors" % s), cur[k],
                               meta)
                stt = pair_stats(prev[k], cur[k])
                print_stats("lr %g %s step%d->step%d (loss %.3f)" % (lr, k, s - 1, s, loss), stt)
                summary.append((lr, k, s, stt["rate"], stt["pm1_share"]))
            prev = cur
    print("summary: lr dtype pair changed% +-1%")
    for lr, k, s, r, pm in summary:
        print("  %-8g %-5s step%d->step%d %7.3f%% %6.1f%%" % (lr, k, s - 1, s, 100 * r, 100 * pm))


if __name__ == "__main__":
    main()
