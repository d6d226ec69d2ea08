"""Type stubs of the native module (crate redquorum-py). Use it through ``redquorum`` and
``redquorum.asyncio``; these names are its building blocks."""

from typing import Any, Awaitable, Callable, List, Optional, Sequence, Tuple, Union

__version__: str
"""The package's version."""

class Leader:
    """The leader of an election, as a majority of nodes report it."""

    identity: str
    """The identity the leader campaigned with."""
    value: str
    """The leader's lock value."""
    term: Optional[int]
    """The leader's term (its fencing token), when a majority agrees on it."""
    ttl: float
    """Seconds left on the leader's key, the shortest among the majority."""

class NodeStatus:
    """What one node holds for a resource."""

    node: str
    """The node's address, without credentials."""
    state: str
    """``free``, ``held``, ``readers``, ``other_type`` or ``unavailable``."""
    value: Optional[str]
    """The lock value, when held."""
    ttl: Optional[float]
    """Seconds left on the key, when it has an expiry."""
    readers: Optional[int]
    """Readers of a read-write lock."""
    detail: Optional[str]
    """Why the node could not be asked, or the Redis type of a key that is not a lock."""
    quarantine: Optional[str]
    """The node's quarantine, if it is quarantined."""
    may_evict: bool
    """Whether the node may evict keys (lock nodes need ``noeviction``)."""

class Watch:
    """Reports each change of an election's leader."""

    def changed(self) -> Optional[Leader]:
        """Blocks until the leader changes (at once the first time); None: nobody leads."""
    def changed_async(self) -> Awaitable[Optional[Leader]]:
        """``changed`` as an awaitable."""

class Held:
    """A held lock, permit, reader, writer or leadership; ``redquorum.Lock`` wraps it."""

    resource: str
    """The locked resource; for several, the first (sorted)."""
    resources: List[str]
    """Every locked resource, sorted."""
    value: str
    """The random value that identifies this acquisition."""
    fence: Optional[int]
    """The fencing token, or None with fencing off."""
    permit: Optional[int]
    """For a semaphore's permit, its index."""
    is_read: bool
    """Whether this is a reader's hold on a read-write lock."""
    kept_alive: bool
    """Whether the lock is kept alive in the background."""
    def remaining(self) -> float:
        """Seconds left before the lock counts as lost; 0.0 once it is."""
    def is_lost(self) -> bool:
        """Whether the lock may no longer be relied on. Final."""
    def loss_reason(self) -> Optional[str]:
        """Why a kept-alive lock was lost, if it was."""
    def extensions(self) -> int:
        """How many background extensions succeeded."""
    def extend(self, ttl: Any) -> None:
        """Resets the TTL to ``ttl`` seconds from now on the nodes that still hold the lock."""
    def extend_async(self, ttl: Any) -> Awaitable[None]:
        """``extend`` as an awaitable."""
    def release(self) -> int:
        """Releases the lock on every node; returns how many confirmed."""
    def release_async(self) -> Awaitable[int]:
        """``release`` as an awaitable."""
    def keep_alive(
        self, ttl: Any, interval: Any = None, margin: Any = None,
        max_extensions: Optional[int] = None, max_hold: Any = None,
    ) -> None:
        """Keeps the lock alive in the background from now on (the library's ``Guard``)."""
    def detach(self) -> str:
        """Gives the lock up without releasing it; returns its value."""
    def on_lost(self, callback: Callable[[], Any]) -> None:
        """Calls ``callback()`` once, from a background thread, when the lock is lost,
        released or dropped."""

class Manager:
    """The library's manager; ``redquorum.Redlock`` and ``redquorum.asyncio.Redlock`` wrap it."""

    nodes: List[str]
    """The nodes' addresses, without credentials."""
    quorum: int
    """How many nodes must grant a request."""
    def __init__(self, servers_: Union[str, Sequence[str]], **settings: Any) -> None:
        """Builds the manager with the library's builder (``ConfigError`` if it refuses)."""
    def acquire(
        self, kind: str, resources: List[str], ttl: Any, *, permits: Optional[int] = None,
        identity: Optional[str] = None, blocking: bool = True, timeout: Any = None,
    ) -> Held:
        """Acquires (``kind``: lock, read, write, campaign); blocks with the GIL released."""
    def acquire_async(
        self, kind: str, resources: List[str], ttl: Any, *, permits: Optional[int] = None,
        identity: Optional[str] = None, blocking: bool = True, timeout: Any = None,
    ) -> Awaitable[Held]:
        """``acquire`` as an awaitable."""
    def locked(self, resource: str) -> Optional[float]:
        """Seconds a quorum holds ``resource`` at least, None when free."""
    def locked_async(self, resource: str) -> Awaitable[Optional[float]]:
        """``locked`` as an awaitable."""
    def extend_value(self, resource: str, value: str, ttl: Any) -> float:
        """Extends a lock known by its value; returns its seconds of validity."""
    def release_value(self, resource: str, value: str) -> int:
        """Releases a lock known by its value; returns how many nodes confirmed."""
    def connect(self) -> List[Tuple[str, str]]:
        """Connects to every node; returns (node, reply) pairs."""
    def settle(self) -> None:
        """Waits for the requests still in flight in the background."""
    def mark_nodes(
        self, force: bool = False, brand_new: bool = False
    ) -> List[Tuple[str, bool, str]]:
        """Vouches for nodes as an operator; returns (node, marked, what happened)."""
    def quarantined_nodes(self) -> List[Tuple[str, float, str]]:
        """The nodes in quarantine: (node, seconds left, why)."""
    def quarantine_notice(self) -> Optional[str]:
        """What to tell a caller that waits while nodes are quarantined, or None."""
    def status(self, resource: str) -> List[NodeStatus]:
        """Who holds ``resource``, node by node."""
    def status_async(self, resource: str) -> Awaitable[List[NodeStatus]]:
        """``status`` as an awaitable."""
    def leader(self, election: str) -> Optional[Leader]:
        """The leader of ``election``, as a majority reports it."""
    def leader_async(self, election: str) -> Awaitable[Optional[Leader]]:
        """``leader`` as an awaitable."""
    def observe(self, election: str) -> Watch:
        """A watch of ``election``'s leader."""
