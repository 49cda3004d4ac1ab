"""The one store of computed tables (what rotary encoders keep in it: :mod:`._rows`).

Whatever peregistry keeps between calls sits in :data:`STORE`: entries keyed by the values that
determine them (an encoder's class and options, the device, the dtypes, what they cover), least
recently used first out beyond one byte budget (:func:`set_table_cache_bytes`; 0 keeps
nothing), emptied by :func:`clear_caches`, one lock around each lookup and insertion. An entry
is found again only through an equal key, never through an object's identity or a version
counter, and nothing made inside a trace or an inference-mode region is kept.

A rotary encoder keeps one table per device and dtype: the half-width ``(cos, sin)`` of
positions ``0 .. n-1`` (``n`` a power of two, grown by doubling). ``positions=None`` at an
integer ``offset`` reads rows ``offset .. offset+seq-1`` (a slice) and integer position ids
gather rows. The angles are elementwise, so each row is what computing that position alone
gives: results equal a fresh computation, bit for bit.
"""

from __future__ import annotations

import _thread
import os
import sys
from collections import OrderedDict
from typing import Any

__all__ = ["STORE", "Store", "clear_caches", "set_table_cache_bytes", "table_cache_bytes"]

#: The default budget of :data:`STORE`, unless ``PEREGISTRY_TABLE_CACHE_BYTES`` says otherwise.
DEFAULT_BUDGET = 256 << 20


def _budget_from_env() -> int:
    text = os.environ.get("PEREGISTRY_TABLE_CACHE_BYTES", "").strip()
    if not text:
        return DEFAULT_BUDGET
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"PEREGISTRY_TABLE_CACHE_BYTES must be a number of bytes >= 0, got "
                         f"{text!r}")
    return value


class Store:
    """Entries keyed by value, least recently used first out beyond a byte budget. Thread-safe:
    each lookup, insertion and reading of the bytes kept holds one lock, and an insertion makes
    room before it adds, so no reader ever sees more bytes kept than the budget. Evicted values
    are let go after the lock is released (their finalizers may read the store)."""

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()  # threading.Lock, without importing threading
        self._entries: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._budget: int | None = None  # read from the environment on first use

    @property
    def budget(self) -> int:
        with self._lock:
            return self._budget_locked()

    def _budget_locked(self) -> int:
        if self._budget is None:  # (under the lock: a concurrent set_budget is not overwritten)
            self._budget = _budget_from_env()
        return self._budget

    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._bytes

    def usage(self) -> tuple[int, int]:
        """``(bytes kept, budget)``, read together under the lock."""
        with self._lock:
            return self._bytes, self._budget_locked()

    def get(self, key: Any) -> Any:
        """The entry of ``key``, or None (also for a key that cannot be hashed)."""
        with self._lock:
            try:
                entry = self._entries.get(key)
            except TypeError:
                return None
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: Any, value: Any, nbytes: int) -> None:
        """Keep ``value`` (of ``nbytes``) under ``key``, if it fits in the budget at all."""
        released: list[Any] = []  # let go of after the lock
        with self._lock:
            budget = self._budget_locked()
            try:
                old = self._entries.pop(key, None)
            except TypeError:
                return
            if old is not None:
                self._bytes -= old[1]
                released.append(old)
            if nbytes > budget:
                return
            self._evict_locked(budget - nbytes, released)  # room first, then the new entry
            self._entries[key] = (value, nbytes)
            self._bytes += nbytes
        released.clear()

    def _evict_locked(self, most: int, released: list[Any]) -> None:
        """Least recently used entries out until at most ``most`` bytes are kept."""
        while self._bytes > most:
            released.append(self._entries.popitem(last=False))
            self._bytes -= released[-1][1][1]

    def set_budget(self, nbytes: int) -> None:
        released: list[Any] = []
        with self._lock:
            self._budget = nbytes
            self._evict_locked(nbytes, released)
        released.clear()

    def clear(self) -> None:
        with self._lock:
            entries, self._entries = self._entries, OrderedDict()
            self._bytes = 0
        entries.clear()


#: The one store of the process.
STORE = Store()


def clear_caches() -> None:
    """Free everything peregistry keeps between calls (docs/architecture.md lists it): the
    tables of :data:`STORE`; the programs compiled for eager JAX calls and the hooks that did
    not trace; the active rotation kernels (read again from the registry on the next rotary
    encoder); the kinds of dtypes seen; the default registry's adapter of each array type and
    its adapters' memos (a ``Ctx``, a device, torch's probes). Made again on next use; results
    never change, only speed. What a registration changes (the plugins and what their hooks
    gave) is renewed by ``register``/``unregister``. A module not imported yet keeps nothing, so
    none is imported here."""
    STORE.clear()
    modules = sys.modules
    if (jax_eager := modules.get("peregistry._jax_eager")) is not None:
        jax_eager.clear()
    if (kernels := modules.get("peregistry.rope._kernels")) is not None:
        kernels.reset()
    if (base := modules.get("peregistry.kinds.base")) is not None:
        base._DTYPE_KINDS.clear()
    # the default registry, through the services it installed (an engine module never
    # imports the registry)
    services = modules["peregistry.kinds._services"]._default
    clear_memos = getattr(services, "clear_memos", None)
    if callable(clear_memos):
        clear_memos()


def set_table_cache_bytes(nbytes: int) -> None:
    """Set the bytes everything peregistry keeps may take together (default 256 MiB, or
    ``PEREGISTRY_TABLE_CACHE_BYTES``); least recently used first out. 0 keeps nothing."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(f"set_table_cache_bytes: nbytes must be an int >= 0, got {nbytes!r}")
    STORE.set_budget(nbytes)


def table_cache_bytes() -> tuple[int, int]:
    """``(bytes kept, budget)`` of the store, read together: bytes kept never exceed it."""
    return STORE.usage()
