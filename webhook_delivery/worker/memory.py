"""glibc's allocator told to give back what large requests used. Without glibc (musl, macOS) nothing is done."""

from __future__ import annotations

import ctypes
from typing import Any


def _glibc() -> Any:
    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim, libc.mallopt  # noqa: B018 - present only in glibc
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _glibc()
M_ARENA_MAX = -8


def limit_malloc_arenas(count: int = 2) -> None:
    """glibc gives each thread its own malloc arena and keeps freed megabytes in it: with a hundred delivery
    threads, every thread that once held a large request keeps its size. Call before the threads start."""
    if _LIBC is not None:
        _LIBC.mallopt(M_ARENA_MAX, count)


def release_free_memory() -> None:
    """Hand the memory of a large request, now freed, back to the system."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
