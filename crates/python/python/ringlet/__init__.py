"""Python client of a Ringlet cluster.

>>> import ringlet
>>> c = ringlet.Cluster(["127.0.0.1:7379"])
>>> c.set("user:1", "alice")
>>> c.get("user:1")
b'alice'

Every call goes through the Rust cluster client (``ringlet-client``), with the GIL released
during I/O. Errors are ``ringlet.RingletError`` subclasses. Also: ``Cluster.pipeline()``
(commands sent at once, one result each), ``AsyncCluster`` (asyncio awaitables) and
``ShmReader`` (one-sided reads from a node on this host started with ``--shm-socket``).
"""

from ringlet._ringlet import (
    AsyncCluster,
    AsyncPipeline,
    Cluster,
    ClusterMapError,
    ConfigError,
    ConnectionError,
    Pipeline,
    ProtocolError,
    RingletError,
    ServerError,
    ShmReader,
    TimeoutError,
    TooLargeError,
    __version__,
)

__all__ = [
    "AsyncCluster",
    "AsyncPipeline",
    "Cluster",
    "ClusterMapError",
    "ConfigError",
    "ConnectionError",
    "Pipeline",
    "ProtocolError",
    "RingletError",
    "ServerError",
    "ShmReader",
    "TimeoutError",
    "TooLargeError",
    "__version__",
]
