"""Type stubs of the ``ringlet`` package (implemented in Rust: crates/python/src)."""

from typing import Any, Awaitable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, TypedDict, Union

__version__: str

Key = Union[bytes, str]
"""A key: ``bytes``, or ``str`` encoded as UTF-8."""
Value = Union[bytes, str]
"""A value: ``bytes``, or ``str`` encoded as UTF-8."""

class MemgestEntry(TypedDict):
    """One row of :meth:`Cluster.memgest_list`."""

    name: str
    kind: str
    default: bool
    keys: int
    closing: bool

class RingletError(Exception):
    """Base class of every error raised by ringlet."""

class ConfigError(RingletError):
    """The client configuration or an argument is unusable (no seeds, a bad timeout, an
    unknown memgest name, a memgest kind that does not parse or is ``none``)."""

class ConnectionError(RingletError):
    """A node could not be reached, its address did not resolve, its connection broke, or
    its TLS handshake failed."""

class TimeoutError(RingletError):
    """The call's deadline passed (retries and backoff included)."""

class ServerError(RingletError):
    """A node answered with an error."""

    status: str
    """The native status name: ``BAD_REQUEST``, ``NO_SPACE``, ``UNSUPPORTED``, ..."""

class ClusterMapError(RingletError):
    """No usable cluster map: no node answered, the map is malformed, or it has no route for
    the key."""

class ProtocolError(RingletError):
    """A node sent bytes or a response that make no sense for the request."""

class TooLargeError(RingletError):
    """A key (> 64 KiB) or value (> 64 MiB) exceeds Ringlet's limits; refused before
    sending."""

class Cluster:
    """A client of a running Ringlet cluster.

    Connects through any of ``seeds`` (``"host:port"`` of nodes' client ports), fetches the
    cluster map and routes every key to its slot's coordinator, following map changes.
    Thread-safe; create it after ``os.fork()``, not before.

    Raises ``ConfigError`` (no seeds, bad timeout), ``ConnectionError`` (a seed does not
    resolve or answer) or ``ClusterMapError`` (no bootstrapped cluster map in time).
    """

    def __init__(
        self,
        seeds: List[str],
        quorum_reads: bool = False,
        timeout: Optional[float] = None,
        tls_ca_file: Optional[str] = None,
        password: Optional[str] = None,
        username: Optional[str] = None,
    ) -> None: ...
    def get(self, key: Key) -> Optional[bytes]:
        """The value of ``key``, or ``None`` if it does not exist."""
    def get_versioned(self, key: Key) -> Optional[Tuple[bytes, int]]:
        """``(value, version)`` of ``key``, or ``None``: the version to pass to ``cas``."""
    def cas(
        self,
        key: Key,
        value: Value,
        version: int,
        memgest: Optional[str] = None,
        ex: Optional[float] = None,
        px: Optional[int] = None,
    ) -> Tuple[bool, int]:
        """Store only if the key's version is ``version`` (``0``: only if absent), decided
        by its coordinator. ``(True, new_version)`` or ``(False, current_version)``."""
    def chase(
        self,
        key: Key,
        links: Sequence[Key],
        depth: int = 1,
        limit: Optional[int] = None,
        fields: Optional[Sequence[Key]] = None,
    ) -> Tuple[List[Tuple[bytes, int, Dict[bytes, bytes]]], str]:
        """Follow the link fields ``links`` breadth-first up to ``depth`` hops (the server's
        CHASE): ``[(key, depth, {attr: value}), ...]`` in BFS order and the stop reason."""
    def set(
        self,
        key: Key,
        value: Value,
        memgest: Optional[str] = None,
        ex: Optional[float] = None,
        px: Optional[int] = None,
        nx: bool = False,
        xx: bool = False,
    ) -> Optional[bool]:
        """Store ``value`` under ``key``, in memgest ``memgest`` or the default one; with
        ``ex`` (seconds) or ``px`` (milliseconds) the key expires after that long; with
        ``nx`` only if the key does not exist, with ``xx`` only if it does. ``True`` if
        stored, ``None`` if ``nx``/``xx`` prevented it (as redis-py).
        Raises ``ConfigError`` for an unknown memgest, ``TooLargeError`` past the limits,
        ``ValueError`` for both or a non-positive ``ex``/``px``, or both ``nx`` and ``xx``."""
    def incr(self, key: Key, amount: int = 1) -> int:
        """Add ``amount`` to the integer at ``key`` (a missing key is 0); the new value.
        Raises ``ServerError`` if the value is not an integer or the sum overflows."""
    def delete(self, key: Key) -> bool:
        """Delete ``key``; ``True`` if it existed."""
    def mget(self, keys: Iterable[Key]) -> List[Optional[bytes]]:
        """The values of ``keys`` (any slots), in order; ``None`` for a missing key."""
    def mset(self, mapping: Mapping[Key, Value]) -> None:
        """Store every pair (any slots) in the default memgest. Not atomic: on error,
        others may have been stored."""
    def pipeline(self) -> Pipeline:
        """A :class:`Pipeline` on this cluster."""
    def epoch(self) -> int:
        """The epoch of the cached cluster map."""
    def refresh_map(self) -> None:
        """Fetch the cluster map now."""
    def memgest_create(self, name: str, kind: str) -> None:
        """Create memgest ``name`` of ``kind`` (``"rep:R"`` or ``"ec:K+M"``)."""
    def memgest_drop(self, name: str) -> None:
        """Drop memgest ``name`` (``ServerError`` while keys live in it)."""
    def memgest_default(self, name: str) -> None:
        """Make ``name`` the memgest of writes that name none."""
    def memgest_move(self, key: Key, name: str) -> None:
        """Move ``key`` into memgest ``name``, atomically (``ServerError`` if either is
        missing)."""
    def memgest_key(self, key: Key) -> Optional[Tuple[str, str, str]]:
        """``(memgest name, kind, version)`` of ``key``, or ``None`` if it does not exist."""
    def memgest_list(self) -> List[MemgestEntry]:
        """Every memgest of the cluster."""
    def memgest_info(self, name: Optional[str] = None) -> str:
        """The ``MEMGEST INFO`` report of one memgest or of all."""
    def memgest_command(self, *args: Union[bytes, str]) -> Any:
        """``MEMGEST *args``; the reply as Python values. A refusal raises ``ServerError``."""
    def command(self, *args: Union[bytes, str, int, float]) -> Any:
        """Any command the nodes serve (HSET, EXPIRE, LINK SET, ...), routed by its keys;
        an error reply raises ``ServerError``."""

class AsyncCluster:
    """An asyncio client of a running Ringlet cluster: the methods of :class:`Cluster` as
    awaitables (``await c.get(k)``), completed on the event loop that awaits them. The
    constructor takes :class:`Cluster`'s arguments and connects before it returns (blocking,
    GIL released). Cancelling an awaitable does not recall a request already sent."""

    def __init__(
        self,
        seeds: List[str],
        quorum_reads: bool = False,
        timeout: Optional[float] = None,
        tls_ca_file: Optional[str] = None,
        password: Optional[str] = None,
        username: Optional[str] = None,
    ) -> None: ...
    def get(self, key: Key) -> Awaitable[Optional[bytes]]: ...
    def set(
        self,
        key: Key,
        value: Value,
        memgest: Optional[str] = None,
        ex: Optional[float] = None,
        px: Optional[int] = None,
        nx: bool = False,
        xx: bool = False,
    ) -> Awaitable[Optional[bool]]: ...
    def incr(self, key: Key, amount: int = 1) -> Awaitable[int]: ...
    def delete(self, key: Key) -> Awaitable[bool]: ...
    def mget(self, keys: Iterable[Key]) -> Awaitable[List[Optional[bytes]]]: ...
    def mset(self, mapping: Mapping[Key, Value]) -> Awaitable[None]: ...
    def epoch(self) -> int:
        """The epoch of the cached cluster map (no I/O, not awaitable)."""
    def refresh_map(self) -> Awaitable[None]: ...
    def memgest_create(self, name: str, kind: str) -> Awaitable[None]: ...
    def memgest_drop(self, name: str) -> Awaitable[None]: ...
    def memgest_default(self, name: str) -> Awaitable[None]: ...
    def memgest_move(self, key: Key, name: str) -> Awaitable[None]: ...
    def memgest_key(self, key: Key) -> Awaitable[Optional[Tuple[str, str, str]]]: ...
    def memgest_list(self) -> Awaitable[List[MemgestEntry]]: ...
    def memgest_info(self, name: Optional[str] = None) -> Awaitable[str]: ...
    def memgest_command(self, *args: Union[bytes, str]) -> Awaitable[Any]:
        """``MEMGEST *args``; the reply as Python values."""
    def command(self, *args: Union[bytes, str, int, float]) -> Awaitable[Any]:
        """Awaitable: any command, as Cluster.command runs it."""
    def pipeline(self) -> "AsyncPipeline":
        """An :class:`AsyncPipeline` on this cluster."""

class Pipeline:
    """A batch of commands from :meth:`Cluster.pipeline`: queue with ``get``, ``mget``,
    ``set``, ``delete``, ``incr`` (each returns the pipeline), then ``execute()`` sends them
    all at once (reads batched into one MGET per node) and returns one result per command,
    in order. A command on a key that an earlier queued command writes waits for it. Not
    atomic. Arguments that cannot be sent raise when queued. A context manager: leaving the
    block drops what was not executed."""

    def get(self, key: Key) -> "Pipeline": ...
    def mget(self, keys: Iterable[Key]) -> "Pipeline": ...
    def set(
        self,
        key: Key,
        value: Value,
        memgest: Optional[str] = None,
        ex: Optional[float] = None,
        px: Optional[int] = None,
        nx: bool = False,
        xx: bool = False,
    ) -> "Pipeline": ...
    def delete(self, key: Key) -> "Pipeline": ...
    def incr(self, key: Key, amount: int = 1) -> "Pipeline": ...
    def execute(self, raise_on_error: bool = True) -> List[Any]:
        """Results in order: ``bytes``/``None`` (GET), a list (MGET), ``True``/``None`` (SET:
        stored / prevented by ``nx``/``xx``), ``True``/``False`` (DEL: the key existed or not),
        ``int`` (INCR). With ``raise_on_error`` the first failure is raised after all ran
        (``Command # N (OP) of pipeline caused error: ...``); otherwise exceptions are
        returned in place. The pipeline is empty after."""
    def reset(self) -> None:
        """Drop every queued command."""
    def __len__(self) -> int: ...
    def __enter__(self) -> "Pipeline": ...
    def __exit__(self, *exc: Any) -> bool: ...

class AsyncPipeline(Pipeline):
    """The :class:`Pipeline` of an :class:`AsyncCluster`: queue as on a ``Pipeline``, then
    ``await p.execute()`` (the queue is emptied when ``execute`` is called)."""

    def execute(self, raise_on_error: bool = True) -> Awaitable[List[Any]]:  # type: ignore[override]
        ...

class ShmReader:
    """A one-sided reader of a Ringlet node on this host (``ringlet server --shm-socket
    PATH``): ``get``/``mget`` read the node's memory, mapped read-only, without a round trip;
    a read that cannot be validated from memory goes over the socket. Thread-safe, but calls
    on one reader take turns: give each busy thread its own.

    Raises ``ConnectionError`` (no node at ``socket_path``), ``ProtocolError`` (another
    shared-memory layout) or ``ConfigError`` (a timeout that is not positive).
    """

    def __init__(self, socket_path: str, timeout: Optional[float] = None) -> None: ...
    def get(self, key: Key) -> Optional[bytes]:
        """The value of ``key``, or ``None`` if it does not exist. Raises ``TooLargeError``
        for a key over 64 KiB, ``ConnectionError``/``TimeoutError`` if a fallback over the
        socket fails."""
    def mget(self, keys: Iterable[Key]) -> List[Optional[bytes]]:
        """The values of ``keys``, in order; ``None`` for a missing key."""
    def stats(self) -> Dict[str, int]:
        """Counters: ``shm_hits``, ``shm_misses``, ``fallbacks``, ``reconnects``, ..."""

__all__: List[str]
