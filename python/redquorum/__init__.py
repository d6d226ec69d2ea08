"""Redis distributed locks for Python on a Rust core: Redlock over N masters, fencing tokens,
keep-alive with a loss signal, semaphores, read-write locks and elections.

This module is the blocking API, for threads; ``redquorum.asyncio`` is the same for asyncio.
Both run the same Rust library, on one background runtime per process, with the GIL released
while they wait on the network.

    from redquorum import Redlock

    rl = Redlock("redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003")
    with rl.lock("invoice:42", ttl=10) as lock:
        write_invoice(fence=lock.fence)

A lock belongs to its handle, not to a thread: any thread holding the ``Lock`` object can
extend or release it.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any, Callable, Iterator, List, Optional, Tuple, TypeVar

from . import _redquorum, errors
from ._common import (
    LockBase, ManagerBase, ReadsTheClock, Request, Resources, Seconds, decorable, entered,
    leaving, not_entered, releasing_at_exit,
)
from ._redquorum import Leader, NodeStatus
from .errors import *  # every exception, as errors.__all__ lists them (one list to keep)

__version__: str = _redquorum.__version__

__all__ = ["Redlock", "Lock", "LockContext", "LeaderWatch", "Leader", "NodeStatus"]
__all__ += errors.__all__

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class _Lost(ReadsTheClock, threading.Event):
    """``Lock.lost``: a ``threading.Event`` whose ``is_set()`` and ``wait()`` also read the
    clock against the lock's deadline (``ReadsTheClock``): the background watcher needs the
    GIL to set it, which threads that keep the GIL can hold up past the keys' expiry."""

    def wait(self, timeout: Optional[float] = None) -> bool:
        until = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            # Never past the deadline: the clock says "lost" then, set or not.
            step = self._held.remaining()
            if until is not None:
                left = until - time.monotonic()
                if left <= 0:
                    return False
                step = min(step, left)
            super().wait(step)
        return True


class Lock(LockBase):
    """A held lock (or permit, reader, writer, leadership). Release it with ``release()``, or
    use ``Redlock.lock(...)`` as a context manager. A handle dropped unreleased is released in
    the background."""

    __slots__ = ()

    @property
    def lost(self) -> threading.Event:
        """A ``threading.Event`` set when the lock is lost (its validity ran out, an extension
        failed, or its keep-alive gave it up) and once it is released: from then on it must not
        be relied on. Wait on it from another thread, or check ``is_set()`` between steps."""
        if self._lost is None:
            event = _Lost(self._held)
            self._held.on_lost(event.set)
            self._lost = event
        return self._lost

    def extend(self, ttl: Seconds) -> None:
        """Resets the TTL to ``ttl`` seconds from now on the nodes that still hold the lock.
        Raises ``LockLost`` (``NotHeld`` when the nodes no longer hold it) if it could not."""
        self._held.extend(ttl)

    def release(self) -> int:
        """Releases the lock on every node; returns how many confirmed. Raises ``NotHeld`` if
        the nodes no longer held it (it expired or was taken over: work done under it may have
        overlapped another holder's), ``LockLost`` if its keep-alive had lost it."""
        try:
            return self._held.release()
        finally:
            self._released()

    def detach(self) -> str:
        """Gives the lock up without releasing it (it expires with its TTL, or is released by
        value); returns its value."""
        return self._held.detach()

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc: Any) -> None:
        _release_at_exit(self, exc[0] is not None)


def _release_at_exit(lock: Lock, failing: bool) -> None:
    # Which of the release's errors the block raises is `releasing_at_exit`'s to say.
    with releasing_at_exit(lock, failing):
        lock.release()


class LockContext:
    """What ``Redlock.lock(...)``, ``read_lock`` and ``write_lock`` return: acquires on ``with``
    and releases when the block ends (raising ``LockLost`` at the end of a block whose lock was
    lost meanwhile).

    One object may be shared, as a module-level lock is, by any number of threads at once:
    each ``with`` takes a lock of its own and releases exactly that one, never another
    thread's (the lock taken is kept in a context variable, per thread and per task). It is not
    reentrant: entering it again inside its own block raises ``RuntimeError`` (the inner block
    would wait for the outer one's lock). The object is also a decorator of plain functions:
    ``@rl.lock("job", ttl=30)`` runs each call under the lock.
    """

    __slots__ = ("_acquire",)

    def __init__(self, acquire: Callable[[], Lock]) -> None:
        self._acquire = acquire

    def __enter__(self) -> Lock:
        not_entered(self)
        return entered(self, self._acquire())

    def __exit__(self, *exc: Any) -> None:
        _release_at_exit(leaving(self), exc[0] is not None)

    def __call__(self, function: F) -> F:
        """Decorates a plain function: each call runs under the lock."""
        decorable(function, asynchronous=False)

        @functools.wraps(function)
        def locked(*args: Any, **kwargs: Any) -> Any:
            with self:
                return function(*args, **kwargs)

        return locked  # type: ignore[return-value]


class LeaderWatch:
    """Reports each change of an election's leader: ``changed()`` blocks until it changes
    (returns at once the first time); iterating yields every change."""

    __slots__ = ("_watch",)

    def __init__(self, watch: Any) -> None:
        self._watch = watch

    def changed(self) -> Optional[Leader]:
        """The new leader, or None when nobody leads."""
        return self._watch.changed()

    def __iter__(self) -> Iterator[Optional[Leader]]:
        while True:
            yield self._watch.changed()


class Redlock(ManagerBase):
    """A lock manager over N independent Redis masters (N = 1 is a single-instance lock).

    ``servers`` is a comma-separated string or a list of URLs:
    ``redis://[user:password@]host[:port][/db]``, ``rediss://`` for TLS,
    ``redis+cluster://host:port,host:port`` for a Redis Cluster node,
    ``redis+unix:///path?pass=...``. Every other setting is the Rust builder's, in seconds,
    with the same default and the same checks (``ConfigError`` when one cannot work).
    No connection is made until the first request (or ``connect()``).
    """

    _context = LockContext

    def _acquire(self, request: Request) -> Lock:
        # What the arguments mean is `Request`'s; this API waits on the caller's thread, with
        # the GIL released.
        return request.granted(Lock(self._m.acquire(*request.args, **request.kwargs)))

    def acquire(
        self, resource: Resources, ttl: Seconds, *, blocking: bool = True,
        timeout: Optional[Seconds] = None, permits: Optional[int] = None, keep_alive: bool = False,
    ) -> Lock:
        """Acquires ``resource`` for ``ttl`` seconds, waiting as ``threading.Lock`` does:
        until acquired (``timeout=None``, ``-1`` or ``math.inf``), at most ``timeout``
        seconds (then ``LockBusy``), or not at all (``blocking=False``). Waiting is for a lock
        somebody holds: nodes that do not answer, or quarantined ones, end the wait with
        ``Unavailable`` or ``Quarantined`` after ``retry_attempts`` attempts in a row (3).
        A list of resources is one lock, all-or-nothing; ``permits=K`` takes one of K permits
        of a semaphore. ``keep_alive=True`` extends it in the background until released.
        Raises ``LockBusy``, ``Unavailable``, ``Quarantined``, ``WrongType`` or ``TooSlow``."""
        return self._acquire(
            Request("lock", resource, ttl, blocking, timeout, keep_alive, permits=permits)
        )

    def try_acquire(
        self, resource: Resources, ttl: Seconds, *, permits: Optional[int] = None,
        keep_alive: bool = False,
    ) -> Lock:
        """One attempt, no retry; raises ``LockBusy`` at once if somebody holds it."""
        return self._acquire(
            Request("lock", resource, ttl, blocking=False, permits=permits, keep_alive=keep_alive)
        )

    def acquire_read(
        self, resource: str, ttl: Seconds, *, blocking: bool = True,
        timeout: Optional[Seconds] = None, keep_alive: bool = False,
    ) -> Lock:
        """A reader of the read-write lock ``resource``: many at once, never with a writer."""
        return self._acquire(Request("read", resource, ttl, blocking, timeout, keep_alive))

    def acquire_write(
        self, resource: str, ttl: Seconds, *, blocking: bool = True,
        timeout: Optional[Seconds] = None, keep_alive: bool = False,
    ) -> Lock:
        """Takes the read-write lock ``resource`` as its writer (alone; holds new readers off
        while it waits)."""
        return self._acquire(Request("write", resource, ttl, blocking, timeout, keep_alive))

    def lock(
        self, resource: Resources, ttl: Seconds, *, blocking: bool = True,
        timeout: Optional[Seconds] = None, permits: Optional[int] = None, keep_alive: bool = False,
    ) -> LockContext:
        """``with rl.lock("invoice:42", ttl=10) as lock:`` acquires as ``acquire`` does and
        releases when the block ends."""
        return self._later(
            "acquire", resource, ttl, blocking=blocking, timeout=timeout, permits=permits,
            keep_alive=keep_alive,
        )

    def read_lock(
        self, resource: str, ttl: Seconds, *, timeout: Optional[Seconds] = None,
        keep_alive: bool = False,
    ) -> LockContext:
        """``with rl.read_lock(...)``: a reader of a read-write lock."""
        return self._later("acquire_read", resource, ttl, timeout=timeout, keep_alive=keep_alive)

    def write_lock(
        self, resource: str, ttl: Seconds, *, timeout: Optional[Seconds] = None,
        keep_alive: bool = False,
    ) -> LockContext:
        """``with rl.write_lock(...)``: the writer of a read-write lock."""
        return self._later("acquire_write", resource, ttl, timeout=timeout, keep_alive=keep_alive)

    def with_lock(self, resource: Resources, ttl: Seconds, work: Callable[[Lock], T]) -> T:
        """Runs ``work(lock)`` under ``resource``, kept alive, and releases it. A thread cannot
        be stopped from outside: ``work`` should check ``lock.is_lost()`` (or ``lock.lost``)
        between steps. Raises ``LockLost`` if the lock was lost before ``work`` returned."""
        with self.lock(resource, ttl, keep_alive=True) as lock:
            return work(lock)

    def campaign(
        self, election: str, identity: str, ttl: Seconds, *, timeout: Optional[Seconds] = None
    ) -> Lock:
        """Campaigns in ``election`` until this candidate leads (or ``timeout`` seconds have
        passed: ``LockBusy``); returns the leadership, kept alive: ``fence`` is the term.
        Release it to resign. An outage ends the campaign as it ends ``acquire``'s wait."""
        return self._acquire(
            Request("campaign", election, ttl, timeout=timeout, identity=identity)
        )

    def leader(self, election: str) -> Optional[Leader]:
        """Who leads ``election``, as a majority of nodes report it; None when nobody does."""
        return self._m.leader(election)

    def observe(self, election: str) -> LeaderWatch:
        """A watch that reports each change of ``election``'s leader."""
        return LeaderWatch(self._m.observe(election))

    def locked(self, resource: str) -> Optional[float]:
        """Whether ``resource`` is held right now (by a quorum of nodes, as a lock or by
        readers): the seconds it stays held at least, or ``None`` when it is free. Raises
        ``Unavailable`` when too few nodes answered to tell. A snapshot: to act on a free lock,
        take it (``blocking=False``) rather than test it first."""
        return self._m.locked(resource)

    def status(self, resource: str) -> List[NodeStatus]:
        """What each node holds for ``resource`` (free, held by which value, quarantined...)."""
        return self._m.status(resource)

    def connect(self) -> List[Tuple[str, str]]:
        """Connects to every node now (optional); returns each node's reply."""
        return self._m.connect()

    def settle(self) -> None:
        """Waits for requests still in flight in the background (before a short process
        exits)."""
        self._m.settle()

    def mark_nodes(
        self, force: bool = False, brand_new: bool = False
    ) -> List[Tuple[str, bool, str]]:
        """Vouches, as an operator, that the servers lost nothing, so they vote at once instead
        of after the restart quarantine; returns ``(node, marked, what happened)`` for each.
        A server up for less than ``max_ttl`` is marked only with ``brand_new=True`` (a new
        server that never held a lock; never after a restart); ``force=True`` marks whatever
        the evidence says."""
        return self._m.mark_nodes(force, brand_new)

    def extend_value(self, resource: str, value: str, ttl: Seconds) -> float:
        """Extends a lock known only by its value; returns the seconds of validity. Under the
        holder's ``lock_delay``, whatever this manager's: the value carries it."""
        return self._m.extend_value(resource, value, ttl)

    def release_value(self, resource: str, value: str) -> int:
        """Releases a lock known only by its value; returns how many nodes confirmed."""
        return self._m.release_value(resource, value)
