"""What the blocking and the asyncio APIs share: turning Python arguments into the native
module's, and the read-only parts of a lock handle."""

from __future__ import annotations

import contextvars
import inspect
import logging
import math
from datetime import timedelta
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _redquorum
from .errors import ConfigError, LockLost, RedquorumError

Seconds = Union[float, int, timedelta]
Resources = Union[str, Sequence[str]]


def names(resource: Resources) -> List[str]:
    """One resource, or several taken as one lock."""
    if isinstance(resource, str):
        return [resource]
    return list(resource)


def wait_args(blocking: bool, timeout: Optional[Seconds]) -> Dict[str, Any]:
    """As ``threading.Lock.acquire``: wait until acquired (``timeout=None``, ``-1`` or
    ``math.inf``), at most ``timeout`` seconds, or not at all (``blocking=False``)."""
    if isinstance(timeout, (int, float)) and (
        timeout == -1 or (math.isinf(timeout) and timeout > 0)
    ):
        timeout = None
    if not blocking and timeout is not None:
        raise ConfigError("a timeout cannot be given with blocking=False (one attempt)")
    if isinstance(timeout, (int, float)) and timeout == 0:
        # One attempt, as `blocking=False`: with a deadline already passed, a semaphore would
        # give up after its first busy permit instead of trying each.
        return {"blocking": False, "timeout": None}
    return {"blocking": blocking, "timeout": timeout}


def manager(servers: Union[str, Sequence[str]], settings: Dict[str, Any]) -> Any:
    return _redquorum.Manager(servers, **{k: v for k, v in settings.items() if v is not None})


class ReadsTheClock:
    """What both APIs' ``Lock.lost`` events add to their base class: ``is_set()`` reads the
    clock against the lock's deadline too, and sets the event once it has passed. The
    background watcher sets it at the deadline, but through the GIL or the event loop, which
    busy code can hold up past the moment the keys expire; a clock read needs neither. So no
    code that checks ``is_set()`` sees the lock held once its deadline has passed (an expiry on
    the servers comes later still, by the drift allowance), however busy the interpreter."""

    #: Whether a read that finds the lock lost also sets the event (waking its waiters): for a
    #: ``threading.Event``, whose ``set()`` any thread may call; not for an ``asyncio.Event``,
    #: which only its loop may set (a thread checking the lock would break that: review).
    _set_when_read = True

    def __init__(self, held: Any) -> None:
        super().__init__()
        self._held = held

    def is_set(self) -> bool:
        if super().is_set():  # type: ignore[misc]
            return True
        if self._held.is_lost():
            if self._set_when_read:
                self.set()  # type: ignore[attr-defined]  # wakes every waiter too
            return True
        return False


class LockView:
    """The read-only side of a held lock, shared by both APIs."""

    __slots__ = ("_held", "_lost")

    def __init__(self, held: Any) -> None:
        self._held = held
        self._lost: Any = None

    @property
    def resource(self) -> str:
        """The locked resource (the Redis key); for several, the first, sorted."""
        return self._held.resource

    @property
    def resources(self) -> List[str]:
        """Every locked resource, sorted and without duplicates."""
        return self._held.resources

    @property
    def value(self) -> str:
        """The random value that identifies this acquisition on the servers."""
        return self._held.value

    @property
    def fence(self) -> Optional[int]:
        """The fencing token: larger than every token handed out for this resource before.
        Pass it with every write to the protected resource, which must refuse a smaller one
        than the largest it has seen. ``None`` with ``fencing=False``."""
        return self._held.fence

    @property
    def permit(self) -> Optional[int]:
        """For a semaphore's permit, which one it is (``0 <= permit < permits``)."""
        return self._held.permit

    @property
    def is_read(self) -> bool:
        """Whether this is a reader's hold on a read-write lock."""
        return self._held.is_read

    @property
    def kept_alive(self) -> bool:
        """Whether the lock is extended in the background (``keep_alive=True``)."""
        return self._held.kept_alive

    def remaining(self) -> float:
        """Seconds left before the lock counts as lost (reads the clock); 0.0 once it is."""
        return self._held.remaining()

    def is_lost(self) -> bool:
        """Whether the lock may no longer be relied on (reads the clock). Final."""
        return self._held.is_lost()

    def loss_reason(self) -> Optional[str]:
        """Why a kept-alive lock was lost, or None."""
        return self._held.loss_reason()

    def extensions(self) -> int:
        """How many background extensions succeeded so far."""
        return self._held.extensions()

    def __repr__(self) -> str:
        return repr(self._held)


class ManagerBase:
    """What the two managers share: the settings (the Rust builder's, by keyword, in seconds),
    the nodes, the quorum and the quarantine, which need no I/O. ``redquorum.Redlock`` (threads)
    and ``redquorum.asyncio.Redlock`` add the calls, blocking or awaitable."""

    def __init__(
        self,
        servers: Union[str, Sequence[str]],
        *,
        max_ttl: Optional[Seconds] = None,
        node_timeout: Optional[Seconds] = None,
        connect_timeout: Optional[Seconds] = None,
        drift_factor: Optional[float] = None,
        retry_attempts: Optional[int] = None,
        retry_delay: Optional[Seconds] = None,
        retry_max_wait: Optional[Seconds] = None,
        lock_delay: Optional[Seconds] = None,
        quarantine: Optional[bool] = None,
        trust_durable_nodes: Optional[bool] = None,
        trust_first_sight: Optional[bool] = None,
        fencing: Optional[bool] = None,
        fence_retention: Optional[Seconds] = None,
        notify: Optional[bool] = None,
        fair: Optional[bool] = None,
        wait_for_replicas: Optional[bool] = None,
        tls_root_certificates: Optional[Union[str, bytes]] = None,
    ) -> None:
        settings = dict(locals())
        del settings["self"], settings["servers"]
        self._m = manager(servers, settings)

    @property
    def nodes(self) -> List[str]:
        """The nodes' addresses, without credentials."""
        return self._m.nodes

    @property
    def quorum(self) -> int:
        """How many nodes must grant a request: N/2 + 1."""
        return self._m.quorum


    def quarantined_nodes(self) -> List[Tuple[str, float, str]]:
        """The nodes whose grants do not count yet: ``(node, seconds left, why)``."""
        return self._m.quarantined_nodes()

    def _notice_quarantine(self) -> None:
        """Logs why an acquisition still waits, if nodes are quarantined, with the call that
        ends the wait where a mark is right."""
        text = self._m.quarantine_notice()
        if text:
            logging.getLogger("redquorum").warning("%s", text)

    def __repr__(self) -> str:
        return repr(self._m)


# The locks the `with` blocks of this thread or task are inside, as (context object, lock)
# pairs, newest last. One variable for the module (a variable per object would stay in every
# context it was ever set in: one entry per `rl.lock(...)` ever entered); a tuple, so a task's
# copy of its parent's context never sees the child's entries.
_ENTERED: contextvars.ContextVar[Tuple[Tuple[object, Any], ...]] = contextvars.ContextVar(
    "redquorum.entered", default=()
)


def not_entered(context: object) -> None:
    """Refuses to enter `context` again in a thread or task that is inside it already: a lock
    object is not reentrant (the inner block would wait for the outer one's lock), and two
    entries of one object in one context could not tell their locks apart at exit."""
    if any(c is context for c, _ in _ENTERED.get()):
        raise RuntimeError(
            "this lock object is already held in this thread or task: it is not reentrant "
            "(use a second rl.lock(...) object to take another lock)"
        )


def entered(context: object, lock: Any) -> None:
    """Records that this thread or task is inside `context`, holding `lock`."""
    _ENTERED.set(_ENTERED.get() + ((context, lock),))


def leaving(context: object) -> Any:
    """The lock this thread or task took when it entered `context`, forgotten."""
    held = _ENTERED.get()
    for i in range(len(held) - 1, -1, -1):
        if held[i][0] is context:
            _ENTERED.set(held[:i] + held[i + 1 :])
            return held[i][1]
    raise RuntimeError("a lock object's block ends where it was not entered (another thread?)")


def decorable(function: Any, asynchronous: bool) -> None:
    """Refuses what a lock object cannot decorate: a generator (its body would run after the
    call returned, with the lock released), or a function of the other API."""
    if inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function):
        raise ConfigError(
            "a generator runs after the call that made it has returned: hold the lock inside "
            "it (`with rl.lock(...):`) rather than decorate it"
        )
    if asynchronous and not inspect.iscoroutinefunction(function):
        raise ConfigError(
            "a plain function takes the blocking manager's lock: @redquorum.Redlock(...).lock(...)"
        )
    if not asynchronous and inspect.iscoroutinefunction(function):
        raise ConfigError(
            "an async function takes the asyncio manager's lock: "
            "@redquorum.asyncio.Redlock(...).lock(...)"
        )


def lost_at_release(lock: "LockView", e: RedquorumError) -> LockLost:
    """The end of a block whose lock ran out of validity, with a release too few nodes
    answered: the work may have overlapped another holder's."""
    return LockLost(
        f"lock on {lock.resource!r} ran out of validity before the block ended, and too few "
        f"nodes answered its release: the work may have overlapped another holder's ({e})"
    )
