"""The exceptions redquorum raises: one class per reason a lock operation can fail.

They mirror the library's ``Cause``, so that code can branch on *why*: ``LockBusy`` (somebody
else holds it: wait or give up) is a different story from ``Unavailable`` (too few nodes
answered: an outage), ``Quarantined`` (nodes that may have lost data do not vote yet: it ends
by itself, see ``ready_in``), ``WrongType`` (the key is not a lock), ``TooSlow`` (granted too
late to be valid), ``NotHeld`` and ``LockLost`` (a lock that was held can no longer be relied
on). Every message is one line and names nodes without credentials.

Attributes, where known: ``resource`` (the lock's name), ``cause`` (a short name:
``"busy"``, ``"unavailable"``, ...), ``quorum``, ``replies`` (``(node, reply)`` pairs).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

__all__ = [
    "RedquorumError",
    "ConfigError",
    "LockBusy",
    "Unavailable",
    "Quarantined",
    "WrongType",
    "TooSlow",
    "LockLost",
    "NotHeld",
    "ProcessForked",
]


class RedquorumError(Exception):
    """The base class of every redquorum exception."""

    resource: Optional[str] = None
    """The resource the operation was on, where known."""
    cause: Optional[str] = None
    """Why, as a short name (``"busy"``, ``"unavailable"``, ``"quarantined"``, ...)."""
    quorum: Optional[int] = None
    """How many nodes had to agree."""
    replies: Optional[List[Tuple[str, str]]] = None
    """Every node's reply to the last round, as ``(node, reply)``, when a round was sent."""


class ConfigError(RedquorumError, ValueError):
    """A setting or argument that cannot work; nothing was sent to any server."""


class LockBusy(RedquorumError):
    """Not acquired: somebody else holds the resource."""


class Unavailable(RedquorumError):
    """Too few nodes gave an answer that counts (unreachable, timed out, refused) to decide."""


class Quarantined(RedquorumError):
    """Nodes that may have lost their data less than ``max_ttl`` ago granted, but do not vote
    yet, and without them there is no quorum. Ends by itself: see ``ready_in``."""

    nodes: Optional[int] = None
    """How many nodes are quarantined."""
    ready_in: Optional[float] = None
    """Seconds until enough of them vote again for the nodes that granted to make a quorum."""
    ready_at: Optional[float] = None
    """When that is, as a ``time.time()`` timestamp."""


class WrongType(RedquorumError):
    """The resource's key holds another Redis type: it is not a lock, and retrying will not
    change that."""

    node: Optional[str] = None
    """The first node that said so."""


class TooSlow(RedquorumError):
    """A quorum granted, but too late: no validity was left."""


class LockLost(RedquorumError):
    """A lock that was held can no longer be relied on: an extension failed, its validity ran
    out, or its keep-alive gave it up. Work done under it may have overlapped another holder's."""


class NotHeld(LockLost):
    """An extension or release found that the nodes no longer hold our value (it expired, was
    deleted or taken over), or the handle was already released."""


class ProcessForked(RedquorumError, RuntimeError):
    """An object made before ``os.fork()`` was used in the child, whose copy of its connections
    and background tasks is dead. Create a new ``Redlock`` in the child."""
