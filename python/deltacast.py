"""ctypes binding over libdeltacast.so.

The binding mirrors include/deltacast.h: every function returns a status;
failures raise DeltacastError carrying the status name and the library's
detail line (dc_last_error()).

Library lookup order: $DELTACAST_LIB, ../build/libdeltacast.so next to this
file, then the system loader ("libdeltacast.so").
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

__all__ = ["DeltacastError", "lib", "version", "build_features", "status_name",
           "status_str", "is_retryable", "config_get", "config_set", "config_table",
           "parse_size", "parse_rate"]


class DeltacastError(RuntimeError):
    """A libdeltacast call failed: .status (int), .name, .detail."""

    def __init__(self, status: int, detail: str):
        self.status = status
        self.name = _lib().dc_status_name(status).decode()
        self.detail = detail
        super().__init__(f"{self.name}: {detail or _lib().dc_status_str(status).decode()}")


def _find_library() -> str:
    env = os.environ.get("DELTACAST_LIB")
    if env:
        return env
    here = Path(__file__).resolve().parent
    for cand in (here.parent / "build" / "libdeltacast.so",):
        if cand.exists():
            return str(cand)
    found = ctypes.util.find_library("deltacast")
    return found or "libdeltacast.so"


class _ConfigEntry(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("def_", ctypes.c_char_p), ("doc", ctypes.c_char_p)]


_LIB = None


def _lib():
    global _LIB
    if _LIB is not None:
        return _LIB
    L = ctypes.CDLL(_find_library())
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
        "dc_parse_size": (c_int, [c_char_p, c_u64p]),
        "dc_parse_rate": (c_int, [c_char_p, ctypes.POINTER(ctypes.c_double)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(L, name)
        fn.restype = res
        fn.argtypes = args
    _LIB = L
    return L


lib = _lib


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
    t = _lib().dc_config_table()
    rows, i = [], 0
    while t[i].name:
        rows.append((t[i].name.decode(), t[i].def_.decode(), t[i].doc.decode()))
        i += 1
    return rows


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
