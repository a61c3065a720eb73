import json, struct, numpy as np
rng = np.random.default_rng(7)
def write(path, tensors):
    hdr = {}; off = 0; blobs = []
    for name, dt, arr in tensors:
        b = arr.tobytes(); hdr[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        off += len(b); blobs.append(b)
    j = json.dumps(hdr, separators=(",", ":")).encode()
    j += b" " * ((8 - len(j) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(j))); f.write(j); [f.write(b) for b in blobs]
a = (rng.standard_normal(1000) * 0.02).astype(np.float32).view(np.uint32) >> 16
a = a.astype(np.uint16)
b = rng.standard_normal(77).astype(np.float32)
c = rng.integers(0, 255, 13, dtype=np.uint8)
n = (1 + 0.05 * rng.standard_normal(64)).astype(np.float32).view(np.uint32) >> 16
n = n.astype(np.uint16)
write("v1_base.safetensors", [("a", "BF16", a), ("b", "F32", b), ("c", "U8", c), ("norm", "BF16", n)])
a2 = a.copy(); idx = rng.choice(1000, 15, replace=False); a2[idx] ^= 1
b2 = b.copy(); b2[3] += 1.0
n2 = n.copy(); n2[5] ^= 2
e = rng.integers(0, 1 << 30, 9, dtype=np.int64)
write("v1_next.safetensors", [("a", "BF16", a2), ("b", "F32", b2), ("c", "U8", c), ("norm", "BF16", n2), ("new", "I64", e)])
