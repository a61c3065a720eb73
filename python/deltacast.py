"""ctypes binding over libdeltacast.so.

The binding mirrors include/deltacast.h: every function returns a status;
failures raise DeltacastError carrying the status name and the library's
detail line (dc_last_error()).

Which libdeltacast it loads (library_path() says which it took, and how):
  1. $DELTACAST_LIB, when set: the file it names (e.g. a build tree's
     build/libdeltacast.so); a line on stderr says so.
  2. The installed module (`meson install` puts it in site-packages): the
     library installed with it, found relative to this file (no
     LD_LIBRARY_PATH; a moved prefix or DESTDIR tree works).
  3. The system loader, by soname (libdeltacast.so.MAJOR.MINOR): a library
     on the loader's path (ldconfig, a distribution package).
Torch and numpy: Sender.from_state_dict (and Receiver's) refit a state
dict's tensors in place; layout() and check_layout() compare nodes;
diff_tensors/apply_tensors and diff_buffer/apply_buffer work in memory
(python/README.md, "Torch and numpy").

A source checkout's deltacast.py never loads a build tree by itself: without
DELTACAST_LIB and an installed library, importing works and the first call
raises OSError saying what to do.  The library must be the version this
module mirrors (__version__'s major.minor): the structs follow its header.
"""
from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

__all__ = ["DeltacastError", "lib", "library_path", "version", "build_features", "status_name",
           "status_str", "is_retryable", "config_get", "config_set", "config_table",
           "config_get_typed", "parse_size", "parse_rate", "diff_files", "apply_files", "diff_bytes",
           "apply_bytes", "checkpoint_digest", "Topology", "run_node", "refit_committed", "Sender",
           "Receiver", "VERSION_NONE", "sender_ranges", "__version__", "LayoutMismatch",
           "layout", "layout_fingerprint", "layout_difference", "check_layout", "placement",
           "diff_tensors", "apply_tensors", "diff_buffer", "apply_buffer"]


class DeltacastError(RuntimeError):
    """A libdeltacast call failed: .status (int), .name, .detail."""

    def __init__(self, status: int, detail: str):
        self.status = status
        self.name = _lib().dc_status_name(status).decode()
        self.detail = detail
        super().__init__(f"{self.name}: {detail or _lib().dc_status_str(status).decode()}")


# (relative folder, file name) of the installed library: written by
# stamp_install.py into the copy `meson install` installs; None here.
_INSTALLED_LIB = None

# How the library was found: (path given to the loader, how), once loaded.
_LIB_FROM = None


def _find_library() -> tuple:
    """(path or soname, how it was chosen) of the library to load."""
    env = os.environ.get("DELTACAST_LIB")
    if env:
        return env, "$DELTACAST_LIB"
    if _INSTALLED_LIB is not None:
        rel, name = _INSTALLED_LIB
        cand = Path(os.path.normpath(Path(__file__).resolve().parent / rel / name))
        if not cand.exists():
            raise OSError(f"deltacast: {cand}, the library installed with this module "
                          f"({__file__}), is missing: reinstall deltacast (meson install), or "
                          "set DELTACAST_LIB to a libdeltacast.so")
        return str(cand), "installed beside this module"
    return _SONAME, "the system loader"


# The library version this binding mirrors (include/deltacast.h DC_VERSION_*).
__version__ = "0.2.1"
# The soname of the library of that version (0.x: major.minor).
_SONAME = "libdeltacast.so." + ".".join(__version__.split(".")[:2])


class _ConfigEntry(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("def_", ctypes.c_char_p), ("doc", ctypes.c_char_p),
                ("type", ctypes.c_int), ("choices", ctypes.c_char_p),
                ("where", ctypes.c_char_p)]


# dc_config_type_t
_CONFIG_TYPES = ("string", "size", "int", "bool", "enum", "ms")


class _DeltaOpts(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("chunk_size", ctypes.c_uint64),
                ("threads", ctypes.c_uint), ("strict_base", ctypes.c_int),
                ("layout", ctypes.c_uint)]


# dc_delta_opts_t.layout: "" = the config key codec_layout
_LAYOUTS = {"": 0, "simd": 1, "compact": 2}


class _DeltaStats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("base_bytes", ctypes.c_uint64),
                ("target_bytes", ctypes.c_uint64), ("delta_bytes", ctypes.c_uint64),
                ("tensors", ctypes.c_uint64), ("elements", ctypes.c_uint64),
                ("changed", ctypes.c_uint64), ("chunks", ctypes.c_uint64),
                ("frames", ctypes.c_uint64), ("frames_by_kind", ctypes.c_uint64 * 5),
                ("payload_bytes", ctypes.c_uint64), ("pos_bytes", ctypes.c_uint64),
                ("val_bytes", ctypes.c_uint64), ("bound_bytes", ctypes.c_double),
                ("bounded_payload", ctypes.c_uint64), ("seconds", ctypes.c_double),
                ("frames_ctx", ctypes.c_uint64), ("bound_ctx_bytes", ctypes.c_double)]

    def as_dict(self) -> dict:
        d = {name: getattr(self, name) for name, _ in self._fields_ if name != "size"}
        d["frames_by_kind"] = list(self.frames_by_kind)
        return d


class _RefitTensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p),
                ("nelems", ctypes.c_uint64)]


class _RefitSegment(ctypes.Structure):
    _fields_ = [("tensor", ctypes.c_char_p), ("offset", ctypes.c_uint64),
                ("length", ctypes.c_uint64), ("ptr", ctypes.c_void_p)]


class _RefitNodeOpts(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("topo", ctypes.c_void_p),
                ("rank", ctypes.c_uint32), ("state_dir", ctypes.c_char_p),
                ("versions_dir", ctypes.c_char_p), ("last_version", ctypes.c_uint32),
                ("dense", ctypes.c_int), ("stats_path", ctypes.c_char_p),
                ("wait_ms", ctypes.c_uint32), ("weights_path", ctypes.c_char_p),
                ("tensors", ctypes.POINTER(_RefitTensor)), ("n_tensors", ctypes.c_size_t),
                ("segments", ctypes.POINTER(_RefitSegment)), ("n_segments", ctypes.c_size_t),
                ("initial_version", ctypes.c_uint64), ("durable", ctypes.c_int),
                ("abort_ms", ctypes.c_uint32), ("chunk_size", ctypes.c_uint64),
                ("memory", ctypes.c_uint32), ("transport", ctypes.c_char_p)]


_MEMORY = {"host": 0, "cuda": 1}

# initial_version of a receiver that holds no version yet (a cold start:
# its first version comes dense); Receiver(initial_version=None) means it.
VERSION_NONE = (1 << 64) - 1


class _RefitEvent(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("type", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("version", ctypes.c_uint64),
                ("baseline", ctypes.c_uint64), ("digest", ctypes.c_uint8 * 16),
                ("status", ctypes.c_int), ("message", ctypes.c_char * 256)]

    _TYPES = {1: "begin", 2: "committed", 3: "aborted", 4: "ended"}
    _FLAGS = {1: "dense", 2: "held", 4: "cold"}

    def as_dict(self) -> dict:
        return {"type": self._TYPES.get(self.type, str(self.type)), "version": self.version,
                "baseline": self.baseline, "digest": bytes(self.digest),
                "status": self.status, "flags": {n for b, n in self._FLAGS.items()
                                                 if self.flags & b},
                "message": self.message.decode(errors="replace")}


# dc_status_t values the Receiver answers without raising
_TIMEOUT, _CANCELED, _NOT_FOUND = -4, -6, -107

_EVENT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_RefitEvent), ctypes.c_void_p)


class _RefitReceiverStats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("versions_committed", ctypes.c_uint64),
                ("versions_aborted", ctypes.c_uint64), ("bytes_received", ctypes.c_uint64),
                ("apply_s", ctypes.c_double), ("repairs", ctypes.c_uint64),
                ("staged_bytes", ctypes.c_uint64), ("held", ctypes.c_int),
                ("last_status", ctypes.c_int)]

    def as_dict(self) -> dict:
        d = {name: getattr(self, name) for name, _ in self._fields_ if name != "size"}
        d["held"] = bool(d["held"])
        return d


class _RefitVersionStats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("version", ctypes.c_uint64),
                ("seconds", ctypes.c_double), ("encode_s", ctypes.c_double),
                ("transfer_s", ctypes.c_double), ("apply_s", ctypes.c_double),
                ("commit_s", ctypes.c_double), ("payload_bytes", ctypes.c_uint64),
                ("repair_bytes", ctypes.c_uint64), ("dense_bytes", ctypes.c_uint64),
                ("frames", ctypes.c_uint64)]

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name, _ in self._fields_ if name != "size"}


_LIB = None


def _lib():
    global _LIB
    if _LIB is not None:
        return _LIB
    global _LIB_FROM
    path, how = _find_library()
    try:
        L = ctypes.CDLL(path)
    except OSError as e:
        if how != "the system loader":
            raise OSError(f"deltacast: cannot load {path} ({how}): {e}") from e
        raise OSError(f"deltacast: {_SONAME} is not on the system loader's path ({e}).  This "
                      f"is the deltacast.py of a source tree ({__file__}), which does not look "
                      "for a build tree by itself: set DELTACAST_LIB=BUILD/libdeltacast.so to "
                      "use a build, or `meson install` and import the installed module") from e
    if how == "$DELTACAST_LIB":
        print(f"deltacast: loading {path} (DELTACAST_LIB), not an installed library",
              file=sys.stderr)
    L.dc_version_string.restype = ctypes.c_char_p
    L.dc_version_string.argtypes = []
    got = L.dc_version_string().decode()
    if got.split(".")[:2] != __version__.split(".")[:2]:
        raise OSError(f"deltacast: {path} ({how}) is libdeltacast {got}, but this module "
                      f"({__file__}) mirrors {__version__}: its structs would not match; "
                      "install the module and library of one version")
    _LIB_FROM = (path, how)
    c_int, c_char_p, c_u64p = ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64)
    sigs = {
        "dc_version_string": (c_char_p, []),
        "dc_build_features": (c_char_p, []),
        "dc_status_name": (c_char_p, [c_int]),
        "dc_status_str": (c_char_p, [c_int]),
        "dc_status_is_retryable": (c_int, [c_int]),
        "dc_last_error": (c_char_p, []),
        "dc_last_status": (c_int, []),
        "dc_clear_error": (None, []),
        "dc_config_table": (ctypes.POINTER(_ConfigEntry), []),
        "dc_config_get": (c_char_p, [c_char_p]),
        "dc_config_set": (c_int, [c_char_p, c_char_p]),
        "dc_config_get_size": (c_int, [c_char_p, c_u64p]),
        "dc_config_get_int": (c_int, [c_char_p, ctypes.POINTER(ctypes.c_int64)]),
        "dc_config_get_bool": (c_int, [c_char_p, ctypes.POINTER(c_int)]),
        "dc_config_get_enum": (c_int, [c_char_p, ctypes.POINTER(ctypes.c_uint)]),
        "dc_config_get_ms": (c_int, [c_char_p, c_u64p]),
        "dc_parse_size": (c_int, [c_char_p, c_u64p]),
        "dc_parse_rate": (c_int, [c_char_p, ctypes.POINTER(ctypes.c_double)]),
    }
    vp, sz, st = ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(_DeltaStats)
    op = ctypes.POINTER(_DeltaOpts)
    sigs.update({
        "dc_delta_diff_files": (c_int, [c_char_p, c_char_p, c_char_p, op, st]),
        "dc_delta_apply_files": (c_int, [c_char_p, c_char_p, c_char_p, op, st]),
        "dc_delta_diff_buffers": (c_int, [vp, sz, vp, sz, op, ctypes.POINTER(vp),
                                          ctypes.POINTER(sz), st]),
        "dc_delta_target_size": (c_int, [vp, sz, c_u64p]),
        "dc_delta_apply_buffers": (c_int, [vp, sz, vp, sz, op, vp, sz, ctypes.POINTER(sz), st]),
        "dc_checkpoint_digest": (c_int, [vp, sz, ctypes.c_uint64, ctypes.c_uint,
                                         ctypes.POINTER(ctypes.c_uint8 * 16)]),
        "dc_free": (None, [vp]),
        "dc_topo_load": (c_int, [c_char_p, ctypes.POINTER(vp)]),
        "dc_topo_synthetic_local": (c_int, [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint16,
                                            ctypes.POINTER(vp)]),
        "dc_topo_node_count": (ctypes.c_uint32, [vp]),
        "dc_topo_free": (None, [vp]),
        "dc_refit_node_run": (c_int, [ctypes.POINTER(_RefitNodeOpts)]),
        "dc_refit_committed": (c_int, [c_char_p, c_u64p, c_u64p, ctypes.c_uint8 * 16]),
        "dc_refit_sender_open": (c_int, [ctypes.POINTER(_RefitNodeOpts), ctypes.POINTER(vp)]),
        "dc_refit_sender_push": (c_int, [vp, ctypes.POINTER(_RefitSegment), sz,
                                         ctypes.POINTER(_RefitVersionStats)]),
        "dc_refit_sender_close": (c_int, [vp]),
        "dc_refit_sender_ranges": (c_int, [ctypes.POINTER(_RefitNodeOpts),
                                           ctypes.POINTER(_RefitSegment), sz,
                                           ctypes.POINTER(sz)]),
        "dc_refit_receiver_open": (c_int, [ctypes.POINTER(_RefitNodeOpts), ctypes.POINTER(vp)]),
        "dc_refit_receiver_on_event": (c_int, [vp, _EVENT_FN, vp]),
        "dc_refit_receiver_wait": (c_int, [vp, c_int, ctypes.POINTER(_RefitEvent)]),
        "dc_refit_receiver_version": (c_int, [vp, c_u64p, ctypes.c_uint8 * 16, c_u64p]),
        "dc_refit_receiver_hold": (c_int, [vp]),
        "dc_refit_receiver_release": (c_int, [vp]),
        "dc_refit_receiver_cancel": (c_int, [vp]),
        "dc_refit_receiver_close": (c_int, [vp]),
        "dc_refit_receiver_stats": (c_int, [vp, ctypes.POINTER(_RefitReceiverStats)]),
    })
    for name, (res, args) in sigs.items():
        fn = getattr(L, name)
        fn.restype = res
        fn.argtypes = args
    _LIB = L
    return L


lib = _lib


def library_path() -> tuple:
    """(path, how): the libdeltacast this module loaded (loading it now if
    it has not yet) and how it was chosen: "$DELTACAST_LIB", "installed
    beside this module" or "the system loader" (path is then the soname)."""
    _lib()
    return _LIB_FROM


def _check(status: int) -> None:
    if status != 0:
        raise DeltacastError(status, _lib().dc_last_error().decode(errors="replace"))


def version() -> str:
    return _lib().dc_version_string().decode()


def build_features() -> dict:
    """{'verbs': True, 'ucx': True, 'cuda': False, ...}"""
    out = {}
    for kv in _lib().dc_build_features().decode().split():
        k, v = kv.split("=", 1)
        out[k] = v == "yes"
    return out


def status_name(status: int) -> str:
    return _lib().dc_status_name(status).decode()


def status_str(status: int) -> str:
    return _lib().dc_status_str(status).decode()


def is_retryable(status: int) -> bool:
    return bool(_lib().dc_status_is_retryable(status))


def config_table() -> list:
    """[(name, default, doc, type, choices or None, where), ...]"""
    t = _lib().dc_config_table()
    rows, i = [], 0
    while t[i].name:
        e = t[i]
        rows.append((e.name.decode(), e.def_.decode(), e.doc.decode(), _CONFIG_TYPES[e.type],
                     e.choices.decode() if e.choices else None, e.where.decode()))
        i += 1
    return rows


def config_get_typed(name: str):
    """The effective value of `name` parsed by its type: int for size, int
    and ms keys, bool for bool keys, the value (str) for enum and string
    keys.  Raises DeltacastError (DC_ERR_INVALID naming the key and value)
    for a bad value, KeyError for an unknown key."""
    types = {r[0]: r[3] for r in config_table()}
    if name not in types:
        raise KeyError(name)
    kind, L, k = types[name], _lib(), name.encode()
    if kind in ("size", "ms"):
        out = ctypes.c_uint64()
        _check((L.dc_config_get_size if kind == "size" else L.dc_config_get_ms)(
            k, ctypes.byref(out)))
        return out.value
    if kind == "int":
        out = ctypes.c_int64()
        _check(L.dc_config_get_int(k, ctypes.byref(out)))
        return out.value
    if kind == "bool":
        out = ctypes.c_int()
        _check(L.dc_config_get_bool(k, ctypes.byref(out)))
        return bool(out.value)
    if kind == "enum":
        out = ctypes.c_uint()
        _check(L.dc_config_get_enum(k, ctypes.byref(out)))
    return config_get(name)


def config_get(name: str) -> str:
    v = _lib().dc_config_get(name.encode())
    if v is None:
        raise KeyError(name)
    return v.decode()


def config_set(name: str, value: str | None) -> None:
    _check(_lib().dc_config_set(name.encode(), None if value is None else value.encode()))


def parse_size(text: str) -> int:
    out = ctypes.c_uint64()
    _check(_lib().dc_parse_size(text.encode(), ctypes.byref(out)))
    return out.value


def parse_rate(text: str) -> float:
    out = ctypes.c_double()
    _check(_lib().dc_parse_rate(text.encode(), ctypes.byref(out)))
    return out.value


# --------------------------------------------------------------------------
# Delta codec
# --------------------------------------------------------------------------

def _opts(chunk_size: int, threads: int, strict_base: bool = False,
          layout: str = "") -> _DeltaOpts:
    if layout not in _LAYOUTS:
        raise ValueError(f"layout {layout!r} is not 'simd' or 'compact'")
    return _DeltaOpts(ctypes.sizeof(_DeltaOpts), chunk_size, threads, int(strict_base),
                      _LAYOUTS[layout])


def _stats() -> _DeltaStats:
    s = _DeltaStats()
    s.size = ctypes.sizeof(_DeltaStats)
    return s


def diff_files(base: str, next_: str, delta: str, chunk_size: int = 0, threads: int = 0,
               layout: str = "") -> dict:
    """Encode the delta BASE -> NEXT into the file DELTA; returns its figures.
    layout: "simd" or "compact" (see `deltacast diff --help`); "" = config."""
    s = _stats()
    _check(_lib().dc_delta_diff_files(os.fsencode(base), os.fsencode(next_), os.fsencode(delta),
                                      ctypes.byref(_opts(chunk_size, threads, layout=layout)),
                                      ctypes.byref(s)))
    return s.as_dict()


def apply_files(base: str, delta: str, out: str | None = None, threads: int = 0,
                strict_base: bool = False) -> dict:
    """Apply DELTA to BASE, writing OUT atomically (out=None: BASE in place).
    strict_base: also refuse a base that differs from the delta's only in
    bytes the delta never reads (one more pass over the base)."""
    s = _stats()
    _check(_lib().dc_delta_apply_files(os.fsencode(base), os.fsencode(delta),
                                       None if out is None else os.fsencode(out),
                                       ctypes.byref(_opts(0, threads, strict_base)),
                                       ctypes.byref(s)))
    return s.as_dict()


def _ro_ptr(data):
    """A pointer to bytes the library only reads: a bytes object, or a
    bytearray's memory (exported while the pointer lives)."""
    if isinstance(data, bytearray):
        return ctypes.cast((ctypes.c_char * len(data)).from_buffer(data), ctypes.c_void_p)
    return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p)


def diff_bytes(base: bytes, next_: bytes, chunk_size: int = 0, threads: int = 0,
               layout: str = "") -> bytes:
    """Delta between two safetensors images held in memory (layout as for
    diff_files)."""
    out, out_len, s = ctypes.c_void_p(), ctypes.c_size_t(), _stats()
    _check(_lib().dc_delta_diff_buffers(_ro_ptr(base), len(base), _ro_ptr(next_), len(next_),
                                        ctypes.byref(_opts(chunk_size, threads, layout=layout)),
                                        ctypes.byref(out), ctypes.byref(out_len),
                                        ctypes.byref(s)))
    try:
        return ctypes.string_at(out, out_len.value)
    finally:
        _lib().dc_free(out)


def _apply_raw(base, delta, threads: int) -> tuple:
    """(ctypes buffer, length) of the target of a delta applied to base."""
    size = ctypes.c_uint64()
    _check(_lib().dc_delta_target_size(_ro_ptr(delta), len(delta), ctypes.byref(size)))
    out = ctypes.create_string_buffer(max(size.value, 1))
    out_len, s = ctypes.c_size_t(), _stats()
    _check(_lib().dc_delta_apply_buffers(_ro_ptr(base), len(base), _ro_ptr(delta), len(delta),
                                         ctypes.byref(_opts(0, threads)),
                                         ctypes.cast(out, ctypes.c_void_p), size.value,
                                         ctypes.byref(out_len), ctypes.byref(s)))
    return out, out_len.value


def apply_bytes(base: bytes, delta: bytes, threads: int = 0) -> bytes:
    """Apply a delta to a safetensors image in memory; returns the target."""
    out, n = _apply_raw(base, delta, threads)
    return out.raw[:n]


def checkpoint_digest(image: bytes, chunk_size: int = 4 << 20, threads: int = 0) -> bytes:
    """The 16-byte checkpoint digest deltas name their base and target by."""
    d = (ctypes.c_uint8 * 16)()
    _check(_lib().dc_checkpoint_digest(_ro_ptr(image), len(image), chunk_size, threads,
                                       ctypes.byref(d)))
    return bytes(d)


# --------------------------------------------------------------------------
# Topology and refit nodes
# --------------------------------------------------------------------------

class _Closing:
    """close() on `with` exit and on garbage collection (never raising there)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Topology(_Closing):
    """A topology (owned; freed with close(), on `with` exit or on garbage
    collection)."""

    def __init__(self, handle: int):
        self._h = ctypes.c_void_p(handle)

    @classmethod
    def load(cls, path: str) -> "Topology":
        h = ctypes.c_void_p()
        _check(_lib().dc_topo_load(os.fsencode(path), ctypes.byref(h)))
        return cls(h.value)

    @classmethod
    def local(cls, regions: int, per_region: int, base_port: int) -> "Topology":
        """Trainer (node 0) + regions x per_region receivers on 127.0.0.1."""
        h = ctypes.c_void_p()
        _check(_lib().dc_topo_synthetic_local(regions, per_region, base_port, ctypes.byref(h)))
        return cls(h.value)

    @property
    def nodes(self) -> int:
        return _lib().dc_topo_node_count(self._h)

    def close(self) -> None:
        if self._h:
            _lib().dc_topo_free(self._h)
            self._h = ctypes.c_void_p()


def _writable_ptr(buf) -> tuple:
    mv = memoryview(buf).cast("B")
    if mv.readonly:
        raise ValueError("segment buffers must be writable (bytearray, numpy array...)")
    arr = (ctypes.c_char * len(mv)).from_buffer(mv)
    return ctypes.addressof(arr), len(mv), arr


def run_node(topo: Topology, rank: int, state_dir: str, *, versions_dir: str | None = None,
             weights_path: str | None = None, tensors=None, segments=None,
             initial_version: int = 0, chunk_size: int = 0, dense: bool = False,
             durable: bool = False, wait_ms: int = 0, abort_ms: int = 0,
             memory: str = "host", transport: str | None = None,
             secret: str | bytes | None = None, secret_file: str | None = None) -> None:
    """Run one node of a refit job until the job ends (blocks).

    Root (rank 0): versions_dir holds v0.safetensors .. vK.safetensors.
    Receiver: weights_path (a safetensors file updated in place) or memory:
    tensors = [(name, dtype, nelems), ...] and segments = [(tensor, byte
    offset, writable buffer), ...] (the placement map: canonical byte ranges
    of each tensor -> your buffers, written in place); memory="cuda" when
    the segments are (device address, nbytes) of GPU memory.  transport:
    "auto", "rdma", "ucx" or "tcp" inside the region (None: config key
    transport).
    """
    keep = []
    cfg = _RefitNodeOpts()
    cfg.size = ctypes.sizeof(_RefitNodeOpts)
    cfg.topo = topo._h
    cfg.rank = rank
    cfg.state_dir = os.fsencode(state_dir)
    cfg.versions_dir = None if versions_dir is None else os.fsencode(versions_dir)
    cfg.weights_path = None if weights_path is None else os.fsencode(weights_path)
    cfg.dense = int(dense)
    cfg.durable = int(durable)
    cfg.wait_ms = wait_ms
    cfg.abort_ms = abort_ms
    cfg.initial_version = initial_version
    cfg.chunk_size = chunk_size
    cfg.memory = _MEMORY[memory]
    cfg.transport = None if transport is None else transport.encode()
    if tensors:
        tarr = (_RefitTensor * len(tensors))()
        for i, (name, dtype, n) in enumerate(tensors):
            tarr[i] = _RefitTensor(name.encode(), dtype.encode(), n)
        cfg.tensors, cfg.n_tensors = tarr, len(tensors)
        keep.append(tarr)
    if segments:
        cfg.segments, cfg.n_segments = _segments(segments, keep), len(segments)
    _check(_lib().dc_refit_node_run(ctypes.byref(cfg)))


def _set_secret(secret, secret_file) -> None:
    """The job secret for every connection of this process: secret_file
    (a file only you can read) sets config secret_file, secret (str or
    bytes, no NUL) config secret; None leaves the environment's
    (DELTACAST_SECRET_FILE, DELTACAST_SECRET).  Process-wide, as config
    keys are."""
    if secret is not None and secret_file is not None:
        raise ValueError("give secret or secret_file, not both")
    if secret_file is not None:
        config_set("secret_file", os.fsdecode(secret_file))
    elif secret is not None:
        text = secret.decode() if isinstance(secret, bytes) else secret
        if not text or "\0" in text:
            raise ValueError("the job secret must be non-empty text without NUL")
        config_set("secret_file", "")  # the environment's file would win
        config_set("secret", text)


def _segments(segments, keep: list):
    """[(tensor, byte offset, buffer), ...] as a C array; the buffers' ctypes
    views (and the array) are appended to keep, which must outlive its use.
    A buffer may also be (address, nbytes): memory the caller owns, e.g. a
    CUDA tensor's data_ptr() with memory="cuda"."""
    sarr = (_RefitSegment * len(segments))()
    for i, (tensor, offset, buf) in enumerate(segments):
        if isinstance(buf, tuple):
            addr, length = int(buf[0]), int(buf[1])
        else:
            addr, length, ref = _writable_ptr(buf)
            keep.append(ref)
        sarr[i] = _RefitSegment(tensor.encode(), offset, length, addr)
    keep.append(sarr)
    return sarr


def _tensor_array(tensors, keep: list):
    """[(name, dtype, nelems), ...] as a C array (appended to keep)."""
    tarr = (_RefitTensor * len(tensors))()
    for i, (name, dtype, n) in enumerate(tensors):
        tarr[i] = _RefitTensor(name.encode(), dtype.encode(), n)
    keep.append(tarr)
    return tarr


def _node_opts(topo: Topology, rank: int, state_dir: str, tensors, keep: list, *,
               chunk_size: int = 0, memory: str = "host",
               transport: str | None = None) -> _RefitNodeOpts:
    """The dc_refit_node_opts_t fields a sender and a receiver share; the C
    arrays it points at are appended to keep."""
    cfg = _RefitNodeOpts()
    cfg.size = ctypes.sizeof(_RefitNodeOpts)
    cfg.topo = topo._h
    cfg.rank = rank
    cfg.state_dir = os.fsencode(state_dir)
    cfg.chunk_size = chunk_size
    cfg.memory = _MEMORY[memory]
    cfg.transport = None if transport is None else transport.encode()
    if tensors:
        cfg.tensors, cfg.n_tensors = _tensor_array(tensors, keep), len(tensors)
    return cfg


def sender_ranges(topo: Topology, rank: int, tensors, chunk_size: int = 0) -> list:
    """[(tensor, byte offset, length), ...]: the canonical bytes sender
    `rank` sends in the job's plan (a trainer shard's Sender segments must
    cover these, and need cover nothing else)."""
    keep = []
    cfg = _node_opts(topo, rank, ".", tensors, keep, chunk_size=chunk_size)
    n = ctypes.c_size_t()
    st = _lib().dc_refit_sender_ranges(ctypes.byref(cfg), None, 0, ctypes.byref(n))
    if st != 0 and n.value == 0:
        _check(st)
    out = (_RefitSegment * max(n.value, 1))()
    _check(_lib().dc_refit_sender_ranges(ctypes.byref(cfg), out, n.value, ctypes.byref(n)))
    return [(out[i].tensor.decode(), out[i].offset, out[i].length) for i in range(n.value)]


class Sender(_Closing):
    """A trainer that sends its weights from its own memory (the topology's
    only sender, rank 0).

    tensors = [(name, dtype, nelems), ...] in canonical order; segments =
    [(tensor, byte offset, buffer), ...] place the weights of the committed
    version (what the receivers hold): the sender copies them as its
    baseline when it opens.  Receivers join in the background.  Each push()
    refits the next version from the segments given (default: the same
    buffers, which the trainer updated in place) and returns once every
    receiver applied and verified it and the commit record was written,
    with the version's figures; the buffers must not change meanwhile.
    close() ends the job (BYE).  Also a context manager.  memory="cuda":
    the segments are (device address, nbytes) of GPU memory.  transport,
    secret and secret_file as for run_node().
    """

    def __init__(self, topo: Topology, state_dir: str, tensors, segments, *, rank: int = 0,
                 initial_version: int = 0, chunk_size: int = 0, dense: bool = False,
                 wait_ms: int = 0, abort_ms: int = 0, stats_path: str | None = None,
                 memory: str = "host", transport: str | None = None,
                 secret: str | bytes | None = None, secret_file: str | None = None):
        _set_secret(secret, secret_file)
        self._keep = []
        self._topo = topo  # borrowed by the sender until close
        cfg = _node_opts(topo, rank, state_dir, tensors, self._keep, chunk_size=chunk_size,
                         memory=memory, transport=transport)
        cfg.stats_path = None if stats_path is None else os.fsencode(stats_path)
        cfg.dense = int(dense)
        cfg.wait_ms = wait_ms
        cfg.abort_ms = abort_ms
        cfg.initial_version = initial_version
        cfg.segments, cfg.n_segments = _segments(segments, self._keep), len(segments)
        h = ctypes.c_void_p()
        _check(_lib().dc_refit_sender_open(ctypes.byref(cfg), ctypes.byref(h)))
        self._h = h

    def push(self, segments=None) -> dict:
        """Refit the next version; returns its figures (version, seconds,
        payload_bytes, ...).  Raises DeltacastError when it was aborted or
        the job failed."""
        if not self._h:
            raise ValueError("sender is closed")
        if segments is None:
            _check_in_place(self)  # a from_state_dict() sender's tensors
            _sync_cuda(self)
        keep = []
        arr, n = None, 0
        if segments is not None:
            arr, n = _segments(segments, keep), len(segments)
        st = _RefitVersionStats()
        st.size = ctypes.sizeof(_RefitVersionStats)
        try:
            _check(_lib().dc_refit_sender_push(self._h, arr, n, ctypes.byref(st)))
        except DeltacastError as e:
            _layout_hint(e, getattr(self, "layout", None))
            raise
        return st.as_dict()

    def close(self) -> None:
        if self._h:
            h, self._h = self._h, None
            _check(_lib().dc_refit_sender_close(h))


class Receiver(_Closing):
    """A rollout engine's weights, refitted in place (a receiver of the job).

    tensors = [(name, dtype, nelems), ...] in canonical order and segments
    = [(tensor, byte offset, buffer), ...] place the weights (written in
    place; memory="cuda": buffers are (device address, nbytes)), or
    weights_path names a safetensors file instead (tensors and segments
    None).  rank: this node in the topology.  The node runs on a thread of
    the library from construction on: it joins the job, relays to its
    children and applies each version as it comes.

    wait(timeout) returns the next event as a dict: type "begin",
    "committed" (the weights are now `version`, checkpoint `digest`),
    "aborted" (back at `baseline`) or "ended" (the job ended with
    `status`), with flags ({"dense", "held", "cold"}) and a message; None
    when none came in time.  on_event(fn) calls fn(event) first, on the
    library's thread (return soon; do not call close or wait there; a
    truthy return queues the event for wait() too).
    hold(): from now on a version that arrives is received and staged, not
    written into the weights (the trainer's push waits, up to the root's
    hold_timeout_ms); release() applies it.  version() says which version
    the weights are: (version or None while it holds none yet, digest,
    in-flight version or None).  initial_version=None: a cold start (holds
    nothing; the first version comes dense).  close() waits for nothing:
    it cancels a job that has not ended (wait for the "ended" event to let
    it end).  Also a context manager.
    """

    def __init__(self, topo: Topology, state_dir: str, tensors=None, segments=None, *,
                 rank: int, weights_path: str | None = None, initial_version: int | None = 0,
                 chunk_size: int = 0, durable: bool = False, abort_ms: int = 0,
                 memory: str = "host", transport: str | None = None):
        self._h = None
        self._keep = []
        self._fn = None
        self._topo = topo  # borrowed by the receiver until close
        cfg = _node_opts(topo, rank, state_dir, tensors, self._keep, chunk_size=chunk_size,
                         memory=memory, transport=transport)
        cfg.weights_path = None if weights_path is None else os.fsencode(weights_path)
        cfg.initial_version = VERSION_NONE if initial_version is None else initial_version
        cfg.durable = int(durable)
        cfg.abort_ms = abort_ms
        if segments:
            cfg.segments, cfg.n_segments = _segments(segments, self._keep), len(segments)
        h = ctypes.c_void_p()
        _check(_lib().dc_refit_receiver_open(ctypes.byref(cfg), ctypes.byref(h)))
        self._h = h

    def _handle(self):
        if not self._h:
            raise ValueError("receiver is closed")
        return self._h

    def wait(self, timeout: float | None = None) -> dict | None:
        """The next event (a dict), or None after timeout seconds (None:
        no limit).  Raises DeltacastError once the "ended" event was taken."""
        ev = _RefitEvent()
        ev.size = ctypes.sizeof(_RefitEvent)
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        st = _lib().dc_refit_receiver_wait(self._handle(), ms, ctypes.byref(ev))
        if st == _TIMEOUT:
            return None
        _check(st)
        d = ev.as_dict()
        if d["type"] == "ended" and getattr(self, "layout", None) is not None:
            d["message"] = _layout_hint_text(d["message"], self.layout)  # from_state_dict
        return d

    def on_event(self, fn) -> None:
        """fn(event) for every event from now on, on the library's thread;
        a truthy return queues the event for wait() as well.  hold() called
        in fn takes effect before the node takes anything more (hold on
        "committed": the weights stay that version).  None: wait() alone."""
        if fn is None:
            self._fn = None
            _check(_lib().dc_refit_receiver_on_event(self._handle(), _EVENT_FN(), None))
            return

        def call(ev, _user):
            try:
                return 1 if fn(ev.contents.as_dict()) else 0
            except Exception as e:  # never unwind into the library's thread
                print(f"deltacast: Receiver.on_event callback raised {e!r}", file=sys.stderr)
                return 1
        cb = _EVENT_FN(call)
        _check(_lib().dc_refit_receiver_on_event(self._handle(), cb, None))
        self._fn = cb  # kept alive while the library may call it

    def version(self) -> tuple:
        """(committed version or None, its checkpoint digest or None,
        version in flight or None)."""
        v, f, d = ctypes.c_uint64(), ctypes.c_uint64(), (ctypes.c_uint8 * 16)()
        st = _lib().dc_refit_receiver_version(self._handle(), ctypes.byref(v), d,
                                              ctypes.byref(f))
        inflight = f.value or None
        if st == _NOT_FOUND:
            return None, None, inflight
        _check(st)
        return v.value, bytes(d), inflight

    def hold(self) -> None:
        """Stage versions that arrive; write nothing into the weights."""
        _check(_lib().dc_refit_receiver_hold(self._handle()))

    def release(self) -> None:
        """Apply what was staged (checked, acknowledged); returns once applied."""
        _check(_lib().dc_refit_receiver_release(self._handle()))

    def cancel(self) -> None:
        """Leave the job now (the root sees the node gone)."""
        _check(_lib().dc_refit_receiver_cancel(self._handle()))

    def stats(self) -> dict:
        st = _RefitReceiverStats()
        st.size = ctypes.sizeof(_RefitReceiverStats)
        _check(_lib().dc_refit_receiver_stats(self._handle(), ctypes.byref(st)))
        return st.as_dict()

    def close(self) -> bool:
        """Free the receiver, canceling a job that has not ended: True when
        the job had ended (the root's BYE), False when it was canceled;
        raises the job's failure, if any."""
        if not self._h:
            return True
        h, self._h = self._h, None
        st = _lib().dc_refit_receiver_close(h)
        if st == _CANCELED:
            return False
        try:
            _check(st)
        except DeltacastError as e:
            _layout_hint(e, getattr(self, "layout", None))  # a from_state_dict receiver's
            raise
        return True


def refit_committed(state_dir: str) -> tuple:
    """(version, baseline, digest bytes) of a node's commit record."""
    v, b, d = ctypes.c_uint64(), ctypes.c_uint64(), (ctypes.c_uint8 * 16)()
    _check(_lib().dc_refit_committed(os.fsencode(state_dir), ctypes.byref(v), ctypes.byref(b), d))
    return v.value, b.value, bytes(d)


# --------------------------------------------------------------------------
# Torch and numpy tensors: state dicts, layouts, diff/apply of named tensors
# --------------------------------------------------------------------------

# torch / numpy dtype name -> safetensors spelling.  numpy has no bfloat16 or
# float8; the ml_dtypes package's arrays carry those names and map too.
_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "float64": "F64",
           "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "int8": "I8", "int16": "I16",
           "int32": "I32", "int64": "I64", "uint8": "U8", "uint16": "U16", "uint32": "U32",
           "uint64": "U64", "bool": "BOOL"}
_DTYPE_SIZE = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1,
               "I16": 2, "I32": 4, "I64": 8, "U8": 1, "U16": 2, "U32": 4, "U64": 8, "BOOL": 1}
_ORDERS = ("name", "given")


class LayoutMismatch(ValueError):
    """Two layouts (names, dtypes, shapes, order) differ; the message names
    the first differing tensor.  .index is its position (or None)."""

    def __init__(self, message: str, index=None):
        super().__init__(message)
        self.index = index


class _View:
    """One tensor's memory: name, safetensors dtype, shape, bytes, address,
    device ("cpu" or "cuda:N"), writable; obj keeps the tensor alive."""
    __slots__ = ("name", "dtype", "shape", "nbytes", "addr", "device", "writable", "obj")


def _view(name: str, t) -> _View:
    """Checks one tensor of a state dict and describes its memory; errors
    name the tensor."""
    v = _View()
    v.name, v.obj = name, t
    if not isinstance(name, str):
        raise TypeError(f"deltacast: state dict key {name!r} is not a str")
    if type(t).__module__.split(".")[0] == "torch" and hasattr(t, "data_ptr"):
        import torch
        if t.layout is not torch.strided:
            raise ValueError(f"deltacast: tensor '{name}' has layout {t.layout}: only dense "
                             "(strided) tensors can be refit; call .to_dense()")
        dname = str(t.dtype).replace("torch.", "")
        dev = t.device
        if dev.type == "cpu":
            v.device = "cpu"
        elif dev.type == "cuda":
            v.device = f"cuda:{dev.index if dev.index is not None else torch.cuda.current_device()}"
        else:
            raise ValueError(f"deltacast: tensor '{name}' is on device '{dev}': only CPU and "
                             "CUDA tensors can be refit")
        if not t.is_contiguous():
            raise ValueError(f"deltacast: tensor '{name}' is not contiguous (shape "
                             f"{tuple(t.shape)}, strides {t.stride()}): deltacast reads and "
                             "writes the tensor's own memory in place, so it cannot copy it; "
                             "make it contiguous first (t.data = t.contiguous(), or keep a "
                             ".contiguous() copy as the refit buffer)")
        v.shape = tuple(int(d) for d in t.shape)
        v.nbytes = t.numel() * t.element_size()
        v.addr = t.data_ptr()
        v.writable = True
    elif hasattr(t, "__array_interface__") and hasattr(t, "ctypes") and hasattr(t, "flags"):
        # a numpy array (ndarray: scalars have no .ctypes and no memory of their own)
        dt = t.dtype
        if dt.byteorder == ">" or (dt.byteorder == "=" and sys.byteorder == "big"):
            raise ValueError(f"deltacast: tensor '{name}' is big-endian ({dt.str}): safetensors "
                             "bytes are little-endian; convert with "
                             ".astype(dtype.newbyteorder('<'))")
        dname = dt.name
        if not t.flags.c_contiguous:
            raise ValueError(f"deltacast: array '{name}' is not C-contiguous (shape {t.shape}, "
                             f"strides {t.strides}): deltacast reads and writes the array's own "
                             "memory in place, so it cannot copy it; make it contiguous first "
                             "(numpy.ascontiguousarray, the torch analogue of .contiguous())")
        v.device = "cpu"
        v.shape = tuple(int(d) for d in t.shape)
        v.nbytes = int(t.nbytes)
        v.addr = int(t.__array_interface__["data"][0])
        v.writable = bool(t.flags.writeable)
    else:
        raise TypeError(f"deltacast: tensor '{name}' is a {type(t).__module__}."
                        f"{type(t).__qualname__}, not a torch tensor or numpy array")
    if dname not in _DTYPES:
        raise ValueError(f"deltacast: tensor '{name}' has dtype {dname}, which safetensors "
                         f"(and deltacast) cannot carry; supported: {', '.join(_DTYPES)}")
    v.dtype = _DTYPES[dname]
    return v


def _views(sd, order: str = "name") -> list:
    """The state dict's tensors in canonical order, checked: a mapping of
    name -> torch tensor or numpy array; one device for all."""
    if order not in _ORDERS:
        raise ValueError(f"deltacast: order {order!r} is not 'name' or 'given'")
    if not hasattr(sd, "items"):
        raise TypeError("deltacast: a state dict is a mapping of name -> tensor "
                        f"(dict, OrderedDict), not a {type(sd).__name__}")
    items = list(sd.items())
    if order == "name":
        items.sort(key=lambda kv: kv[0] if isinstance(kv[0], str) else "")
    views = [_view(name, t) for name, t in items]
    devs = {}
    for v in views:
        devs.setdefault(v.device, v.name)
    if len(devs) > 1:
        desc = ", ".join(f"'{n}' on {d}" for d, n in devs.items())
        raise ValueError(f"deltacast: the tensors are on {len(devs)} devices ({desc}): one "
                         "refit handle takes the tensors of one device; move them, or open "
                         "one handle per device")
    return views


def _normalize_layout(lay) -> list:
    if hasattr(lay, "items"):
        lay = layout(lay)
    out = []
    for e in lay:
        name, dtype, shape = e
        out.append((str(name), str(dtype), tuple(int(d) for d in shape)))
    return out


def layout(sd, order: str = "name") -> list:
    """[(name, dtype, shape), ...]: a state dict's layout as refit sees it
    (safetensors dtype spelling, shape a tuple), in canonical order.

    order="name" (the default): sorted by name, so every node that holds the
    same tensors agrees whatever order its model code registered them in
    (a trainer's and a rollout engine's model classes often differ);
    order="given": the mapping's own order (model.state_dict()'s
    registration order), e.g. to match a safetensors file's data order.
    Print it, or json.dump it, to compare nodes; layout_fingerprint() is
    its short digest and check_layout() names the first difference."""
    return [(v.name, v.dtype, v.shape) for v in _views(sd, order)]


def layout_fingerprint(lay, order: str = "name") -> str:
    """A 16-hex-digit digest of a layout (names, dtypes, shapes, order):
    equal on two nodes exactly when their layouts are equal.  lay: a
    layout() list (or its JSON round trip) or a state dict (then in
    `order`, as for layout())."""
    import hashlib
    import json
    if hasattr(lay, "items"):
        lay = layout(lay, order)
    lay = _normalize_layout(lay)
    text = json.dumps([[n, d, list(s)] for n, d, s in lay], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _fmt(e) -> str:
    return f"'{e[0]}' {e[1]} {list(e[2])}"


def _first_difference(mine, theirs):
    """(index, sentence) of the first differing tensor, or None."""
    a, b = _normalize_layout(mine), _normalize_layout(theirs)
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            what = "name" if x[0] != y[0] else "dtype" if x[1] != y[1] else "shape"
            return i, f"tensor {i}: here {_fmt(x)}, expected {_fmt(y)} (the {what} differs)"
    if len(a) != len(b):
        i = min(len(a), len(b))
        here = _fmt(a[i]) if len(a) > len(b) else "nothing"
        there = _fmt(b[i]) if len(b) > len(a) else "nothing"
        return i, (f"tensor {i}: here {here}, expected {there} ({len(a)} tensors here, "
                   f"{len(b)} expected)")
    return None


def layout_difference(mine, theirs) -> str | None:
    """None when the two layouts (or state dicts) are equal, else a
    sentence naming the first differing tensor: its position, and name,
    dtype and shape on each side."""
    d = _first_difference(mine, theirs)
    return None if d is None else d[1]


def check_layout(mine, expected) -> None:
    """Raise LayoutMismatch naming the first differing tensor unless the
    layouts (or state dicts) `mine` and `expected` are equal."""
    d = _first_difference(mine, expected)
    if d is not None:
        raise LayoutMismatch(f"deltacast: layout mismatch at {d[1]}; this node's layout "
                             f"fingerprint {layout_fingerprint(mine)}, expected "
                             f"{layout_fingerprint(expected)}", d[0])


def placement(sd, order: str = "name") -> tuple:
    """(tensors, segments, memory) of a state dict for Sender, Receiver or
    run_node: tensors [(name, dtype, nelems), ...] in canonical order (see
    layout()), segments [(name, 0, (address, nbytes)), ...] pointing at
    each tensor's own memory (empty tensors have none), memory "host" or
    "cuda".  The tensors must stay alive, contiguous and in place while it
    is used."""
    return _placement(sd, order)[:3]


def _placement(sd, order: str = "name") -> tuple:
    """placement() and the checked views."""
    views = _views(sd, order)
    tensors, segments = [], []
    for v in views:
        tensors.append((v.name, v.dtype, v.nbytes // _DTYPE_SIZE[v.dtype]))
        if v.nbytes:
            segments.append((v.name, 0, (v.addr, v.nbytes)))
    memory = "cuda" if views and views[0].device.startswith("cuda") else "host"
    return tensors, segments, memory, views


def _state_dict_handle(cls, sd, topo, state_dir, rank, order, expect_layout, kw):
    if expect_layout is not None:
        check_layout(layout(sd, order), expect_layout)
    tensors, segments, memory, views = _placement(sd, order)
    if "memory" in kw and kw["memory"] != memory:
        raise ValueError(f"deltacast: memory={kw['memory']!r} given, but the tensors are "
                         f"{views[0].device} memory")
    kw["memory"] = memory
    if memory == "host":
        ro = [v.name for v in views if not v.writable]
        if ro and cls is not Sender:
            raise ValueError(f"deltacast: array '{ro[0]}' is read-only: a receiver writes the "
                             "weights in place")
    try:
        h = cls(topo, state_dir, tensors, segments, rank=rank, **kw)
    except DeltacastError as e:
        _layout_hint(e, [(v.name, v.dtype, v.shape) for v in views])
        raise
    h._sd_views = [(v.name, v.obj, v.addr, v.nbytes) for v in views]
    h.layout = [(v.name, v.dtype, v.shape) for v in views]
    return h


def _layout_hint_text(text: str, lay) -> str:
    """text, with this node's layout fingerprint appended when it is the
    engine's "layout mismatch" (its ids say that the layouts differ, not
    where)."""
    if lay is None or "layout mismatch" not in text:
        return text
    return (f"{text} (this node's layout fingerprint {layout_fingerprint(lay)}: compare "
            "deltacast.layout(state_dict) on each node, or pass the other's as "
            "expect_layout= to name the first differing tensor)")


def _layout_hint(e: DeltacastError, lay) -> None:
    """_layout_hint_text on an error's message."""
    e.args = (_layout_hint_text(e.args[0], lay),)


def _check_in_place(h) -> None:
    """A state-dict handle's tensors must not have moved since it opened."""
    for name, t, addr, nbytes in getattr(h, "_sd_views", ()):
        now = t.data_ptr() if hasattr(t, "data_ptr") else int(t.__array_interface__["data"][0])
        if now != addr:
            raise ValueError(f"deltacast: tensor '{name}' moved since the handle opened (its "
                             "memory was replaced, e.g. by param.data = ...): update tensors in "
                             "place (copy_(), an optimizer step), or open a new handle")


def _sync_cuda(h) -> None:
    """A state-dict handle over CUDA tensors: finish the work queued on
    their devices (an optimizer step on a side stream) before the engine,
    on CUDA's legacy default stream, reads them."""
    devs = {str(t.device) for _, t, _, _ in getattr(h, "_sd_views", ())
            if getattr(getattr(t, "device", None), "type", None) == "cuda"}
    if devs:
        import torch
        for d in sorted(devs):
            torch.cuda.synchronize(d)


def _sender_from_state_dict(cls, sd, topo, state_dir, *, rank: int = 0, order: str = "name",
                            expect_layout=None, **kw):
    """A Sender over a state dict's own memory (torch tensors or numpy
    arrays, e.g. model.state_dict()).  The tensors are the committed
    weights now; update them in place (optimizer.step()) and push().

    Canonical order: see layout() (order="name" by default); every node of
    the job must use the same.  expect_layout: a layout() list (e.g. the
    rollout engine's, loaded from JSON) checked first, LayoutMismatch
    naming the first differing tensor.  CPU tensors: memory "host"; CUDA
    tensors: memory "cuda" with their data_ptr(); mixed devices,
    non-contiguous tensors and dtypes safetensors lacks are refused naming
    the tensor.  Other keywords as for Sender().  The handle's .layout is
    the layout it sends."""
    return _state_dict_handle(cls, sd, topo, state_dir, rank, order, expect_layout, kw)


Sender.from_state_dict = classmethod(_sender_from_state_dict)


def _receiver_from_state_dict(cls, sd, topo, state_dir, *, rank: int, order: str = "name",
                              expect_layout=None, **kw):
    """A Receiver that writes each version into a state dict's own memory
    (torch tensors or numpy arrays, writable, e.g. the rollout model's
    state_dict()); checks as for Sender.from_state_dict.  A receiver whose
    layout differs from the trainer's is refused by the engine; the error
    then carries this node's layout fingerprint (compare
    deltacast.layout(sd) on both)."""
    return _state_dict_handle(cls, sd, topo, state_dir, rank, order, expect_layout, kw)


Receiver.from_state_dict = classmethod(_receiver_from_state_dict)


def _st_image(views) -> bytearray:
    """A safetensors image of the views (CPU memory), tensors in the views'
    order, header as the reference writes it."""
    import json
    header, off = {}, 0
    for v in views:
        if v.device != "cpu":
            raise ValueError(f"deltacast: tensor '{v.name}' is on {v.device}: diff and apply "
                             "take CPU tensors (.cpu())")
        header[v.name] = {"dtype": v.dtype, "shape": list(v.shape),
                          "data_offsets": [off, off + v.nbytes]}
        off += v.nbytes
    h = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    h += b" " * (-len(h) % 8)
    out = bytearray(8 + len(h) + off)
    out[:8] = len(h).to_bytes(8, "little")
    out[8:8 + len(h)] = h
    pos = 8 + len(h)
    for v in views:
        if v.nbytes:
            ctypes.memmove((ctypes.c_char * v.nbytes).from_buffer(out, pos), v.addr, v.nbytes)
        pos += v.nbytes
    return out


def _st_parse(image, views) -> tuple:
    """(data offset, [(begin, end)]) of a delta's target image, checked
    against the views' layout before anything is written: the delta (and so
    the target's header) is input like any other."""
    import json
    try:
        n = int.from_bytes(bytes(image[:8]), "little")
        header = json.loads(bytes(image[8:8 + n]))
        header.pop("__metadata__", None)
        ents = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
        lay = [(k, e["dtype"], tuple(e["shape"])) for k, e in ents]
        spans = [(int(e["data_offsets"][0]), int(e["data_offsets"][1])) for _, e in ents]
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        raise ValueError(f"deltacast: the delta's target is not a safetensors image ({e}); "
                         "nothing was written") from None
    check_layout([(v.name, v.dtype, v.shape) for v in views], lay)
    for v, (b, e) in zip(views, spans):
        if e - b != v.nbytes or b < 0 or 8 + n + e > len(image):
            raise ValueError(f"deltacast: the delta's target holds tensor '{v.name}' at bytes "
                             f"[{b}, {e}), not its {v.nbytes} bytes; nothing was written")
    return 8 + n, spans


def diff_tensors(base_sd, next_sd, *, order: str = "name", chunk_size: int = 0,
                 threads: int = 0, layout: str = "") -> bytes:
    """The delta between two state dicts of one layout (torch CPU tensors
    or numpy arrays): bytes that apply_tensors() turns base_sd into next_sd
    with.  The tensors are read once, into a safetensors image each (two
    copies of the weights in memory).  layout: the codec layout, as for
    diff_bytes()."""
    bv, nv = _views(base_sd, order), _views(next_sd, order)
    check_layout([(v.name, v.dtype, v.shape) for v in nv], [(v.name, v.dtype, v.shape) for v in bv])
    return diff_bytes(_st_image(bv), _st_image(nv), chunk_size, threads, layout)


def apply_tensors(sd, delta: bytes, *, order: str = "name", threads: int = 0) -> None:
    """Apply a diff_tensors() delta to the state dict in place.  Verified
    before anything is written: a delta made from another base raises
    DeltacastError (DC_ERR_WRONG_BASE), one whose target has another
    layout LayoutMismatch; the tensors are then untouched."""
    views = _views(sd, order)
    ro = [v.name for v in views if not v.writable]
    if ro:
        raise ValueError(f"deltacast: array '{ro[0]}' is read-only: apply writes in place")
    out, n = _apply_raw(_st_image(views), delta, threads)
    target = memoryview(out).cast("B")[:n]
    data, spans = _st_parse(target, views)
    for v, (b, e) in zip(views, spans):
        if v.nbytes:
            ctypes.memmove(v.addr, ctypes.addressof(out) + data + b, v.nbytes)


def _raw_view(buf, what: str) -> _View:
    """A buffer-protocol object, numpy array or torch CPU tensor as raw
    bytes (one "U8" tensor named 'buffer')."""
    if type(buf).__module__.split(".")[0] == "torch" or hasattr(buf, "__array_interface__"):
        v = _view(what, buf)
        if v.device != "cpu":
            raise ValueError(f"deltacast: the {what} is on {v.device}: diff_buffer and "
                             "apply_buffer take CPU memory (.cpu())")
    else:
        mv = memoryview(buf)
        if not mv.c_contiguous:
            raise ValueError(f"deltacast: the {what} is not C-contiguous: deltacast works on "
                             "its memory in place")
        mv = mv.cast("B")
        v = _View()
        v.name, v.obj, v.device, v.nbytes = what, mv, "cpu", len(mv)
        v.writable = not mv.readonly
        if v.writable:
            arr = (ctypes.c_char * len(mv)).from_buffer(mv) if len(mv) else None
            v.obj = (mv, arr)
            v.addr = ctypes.addressof(arr) if arr is not None else 0
        else:
            data = bytes(mv)
            v.obj = data
            v.addr = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value or 0
    v.name, v.dtype, v.shape = "buffer", "U8", (v.nbytes,)
    return v


def diff_buffer(base, next_, *, chunk_size: int = 0, threads: int = 0, layout: str = "") -> bytes:
    """The delta between two equally long buffers (bytes, bytearray,
    memoryview, numpy array, torch CPU tensor: any C-contiguous memory, as
    raw bytes).  apply_buffer() applies it."""
    b, n = _raw_view(base, "base buffer"), _raw_view(next_, "next buffer")
    if b.nbytes != n.nbytes:
        raise ValueError(f"deltacast: the buffers differ in length ({b.nbytes} and {n.nbytes} "
                         "bytes)")
    return diff_bytes(_st_image([b]), _st_image([n]), chunk_size, threads, layout)


def apply_buffer(buf, delta: bytes, *, threads: int = 0) -> None:
    """Apply a diff_buffer() delta to a writable buffer in place, verified
    first: a delta of another base raises DeltacastError
    (DC_ERR_WRONG_BASE) and the buffer is untouched."""
    v = _raw_view(buf, "buffer")
    if not v.writable:
        raise ValueError("deltacast: the buffer is read-only: apply_buffer writes in place")
    out, n = _apply_raw(_st_image([v]), delta, threads)
    data, _ = _st_parse(memoryview(out).cast("B")[:n], [v])
    if v.nbytes:
        ctypes.memmove(v.addr, ctypes.addressof(out) + data, v.nbytes)
