"""The asyncio API: the same manager and locks as ``redquorum``, awaited on the running loop.

    from redquorum.asyncio import Redlock

    rl = Redlock("redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003")
    async with rl.lock("invoice:42", ttl=10) as lock:
        await write_invoice(fence=lock.fence)

The network work runs on redquorum's own runtime; only the result comes back to the loop.
A lock belongs to its handle, not to a task: two tasks on one loop never see each other's lock,
and any task holding the ``Lock`` object can release it.
"""

from __future__ import annotations

import asyncio as _asyncio
import functools
import inspect
from typing import (
    Any, AsyncIterator, Awaitable, Callable, List, Literal, Optional, Tuple, TypeVar, Union,
)

from ._common import (
    LockBase, ManagerBase, ReadsTheClock, Request, Resources, Seconds, decorable, entered,
    leaving, not_entered, releasing_at_exit,
)
from ._redquorum import Leader, NodeStatus
from .errors import LockLost

__all__ = ["Redlock", "Lock", "AsyncLockContext", "LeaderWatch"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class _Lost(ReadsTheClock, _asyncio.Event):
    """``Lock.lost``: an ``asyncio.Event`` whose ``is_set()`` and ``wait()`` also read the
    clock against the lock's deadline (``ReadsTheClock``): the background watcher sets it
    through the event loop, which a busy task can hold up past the keys' expiry."""

    _set_when_read = False  # only the loop sets it: `is_set()` may be called from any thread

    async def wait(self) -> Literal[True]:
        while not self.is_set():
            # Never past the deadline: the clock says "lost" then, set or not.
            try:
                await _asyncio.wait_for(super().wait(), self._held.remaining())
            except _asyncio.TimeoutError:
                pass
        return True


class Lock(LockBase):
    """A held lock, for asyncio. ``extend`` and ``release`` are coroutines; ``lost`` is an
    ``asyncio.Event``."""

    __slots__ = ()

    @property
    def lost(self) -> _asyncio.Event:
        """An ``asyncio.Event`` of the loop that first reads it, set when the lock is lost (its
        validity ran out, an extension failed, its keep-alive gave it up) and once it is
        released: ``await lock.lost.wait()`` to stop work when the lock goes."""
        if self._lost is None:
            loop = _asyncio.get_running_loop()
            event = _Lost(self._held)

            def fire() -> None:
                try:
                    loop.call_soon_threadsafe(event.set)
                except RuntimeError:
                    pass  # the loop is closed: nobody waits any more

            self._held.on_lost(fire)
            self._lost = event
        return self._lost

    async def extend(self, ttl: Seconds) -> None:
        """Resets the TTL to ``ttl`` seconds from now; raises ``LockLost``/``NotHeld`` if it
        could not."""
        await self._held.extend_async(ttl)

    async def release(self) -> int:
        """Releases the lock on every node; returns how many confirmed. Raises ``NotHeld`` if
        the nodes no longer held it, ``LockLost`` if its keep-alive had lost it."""
        try:
            return await self._held.release_async()
        finally:
            self._released()

    async def __aenter__(self) -> "Lock":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await _release_at_exit(self, exc[0] is not None)


async def _release_at_exit(lock: Lock, failing: bool) -> None:
    # As in the blocking API, with the release awaited.
    with releasing_at_exit(lock, failing):
        await lock.release()


class AsyncLockContext:
    """What ``Redlock.lock(...)`` returns: acquires on ``async with``, releases at the end of
    the block (raising ``LockLost`` at the end of a block whose lock was lost meanwhile).

    One object may be shared by any number of tasks (and threads running loops): each
    ``async with`` takes a lock of its own and releases exactly that one (kept in a context
    variable, which every task has a copy of). Not reentrant: entering it again inside its own
    block raises ``RuntimeError``. Also a decorator of ``async`` functions:
    ``@rl.lock("job", ttl=30)``.
    """

    __slots__ = ("_acquire",)

    def __init__(self, acquire: Callable[[], Awaitable[Lock]]) -> None:
        self._acquire = acquire

    async def __aenter__(self) -> Lock:
        not_entered(self)
        return entered(self, await self._acquire())

    async def __aexit__(self, *exc: Any) -> None:
        await _release_at_exit(leaving(self), exc[0] is not None)

    def __call__(self, function: F) -> F:
        """Decorates an ``async`` function: each call runs under the lock."""
        decorable(function, asynchronous=True)

        @functools.wraps(function)
        async def locked(*args: Any, **kwargs: Any) -> Any:
            async with self:
                return await function(*args, **kwargs)

        return locked  # type: ignore[return-value]


class LeaderWatch:
    """Reports each change of an election's leader: ``await changed()``, or
    ``async for leader in watch``."""

    __slots__ = ("_watch",)

    def __init__(self, watch: Any) -> None:
        self._watch = watch

    async def changed(self) -> Optional[Leader]:
        """The new leader, or None when nobody leads (at once the first time)."""
        return await self._watch.changed_async()

    def __aiter__(self) -> AsyncIterator[Optional[Leader]]:
        return self._changes()

    async def _changes(self) -> AsyncIterator[Optional[Leader]]:
        while True:
            yield await self._watch.changed_async()


class Redlock(ManagerBase):
    """The lock manager for asyncio; the same settings as ``redquorum.Redlock``."""

    _context = AsyncLockContext

    async def _acquire(self, request: Request) -> Lock:
        # What the arguments mean is `Request`'s; here the wait runs on redquorum's runtime and
        # is awaited. A wait of a second says why, once (as the blocking API's does from its
        # thread).
        notice = _asyncio.get_running_loop().call_later(1.0, self._notice_quarantine)
        try:
            held = await self._m.acquire_async(*request.args, **request.kwargs)
        finally:
            notice.cancel()
        return request.granted(Lock(held))

    async def acquire(
        self, resource: Resources, ttl: Seconds, *, blocking: bool = True,
        timeout: Optional[Seconds] = None, permits: Optional[int] = None, keep_alive: bool = False,
    ) -> Lock:
        """As ``redquorum.Redlock.acquire``, awaited."""
        return await self._acquire(
            Request("lock", resource, ttl, blocking, timeout, keep_alive, permits=permits)
        )

    async def try_acquire(
        self, resource: Resources, ttl: Seconds, *, permits: Optional[int] = None,
        keep_alive: bool = False,
    ) -> Lock:
        """One attempt, no retry; raises ``LockBusy`` at once if somebody holds it."""
        return await self._acquire(
            Request("lock", resource, ttl, blocking=False, permits=permits, keep_alive=keep_alive)
        )

    async def acquire_read(
        self, resource: str, ttl: Seconds, *, blocking: bool = True,
        timeout: Optional[Seconds] = None, keep_alive: bool = False,
    ) -> Lock:
        """A reader of the read-write lock ``resource``."""
        return await self._acquire(Request("read", resource, ttl, blocking, timeout, keep_alive))

    async def acquire_write(
        self, resource: str, ttl: Seconds, *, blocking: bool = True,
        timeout: Optional[Seconds] = None, keep_alive: bool = False,
    ) -> Lock:
        """The writer of the read-write lock ``resource``."""
        return await self._acquire(Request("write", resource, ttl, blocking, timeout, keep_alive))

    def lock(
        self, resource: Resources, ttl: Seconds, *, blocking: bool = True,
        timeout: Optional[Seconds] = None, permits: Optional[int] = None, keep_alive: bool = False,
    ) -> AsyncLockContext:
        """``async with rl.lock("invoice:42", ttl=10) as lock:``."""
        return self._later(
            "acquire", resource, ttl, blocking=blocking, timeout=timeout, permits=permits,
            keep_alive=keep_alive,
        )

    def read_lock(
        self, resource: str, ttl: Seconds, *, timeout: Optional[Seconds] = None,
        keep_alive: bool = False,
    ) -> AsyncLockContext:
        """``async with rl.read_lock(...)``: a reader."""
        return self._later("acquire_read", resource, ttl, timeout=timeout, keep_alive=keep_alive)

    def write_lock(
        self, resource: str, ttl: Seconds, *, timeout: Optional[Seconds] = None,
        keep_alive: bool = False,
    ) -> AsyncLockContext:
        """``async with rl.write_lock(...)``: the writer."""
        return self._later("acquire_write", resource, ttl, timeout=timeout, keep_alive=keep_alive)

    async def with_lock(
        self,
        resource: Resources,
        ttl: Seconds,
        work: Union[Awaitable[T], Callable[[Lock], Awaitable[T]]],
        *,
        timeout: Optional[Seconds] = None,
    ) -> T:
        """Acquires ``resource``, keeps it alive, runs ``work`` (a coroutine, or a function
        of the lock returning one) and releases. If the lock is lost first, the work's task
        is cancelled and ``LockLost`` is raised: nothing runs on under a lost lock."""
        lock = await self.acquire(resource, ttl, timeout=timeout, keep_alive=True)
        lost = lock.lost
        coroutine = work if inspect.isawaitable(work) else work(lock)  # type: ignore[operator]
        task = _asyncio.ensure_future(coroutine)
        watch = _asyncio.ensure_future(lost.wait())
        try:
            await _asyncio.wait({task, watch}, return_when=_asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            watch.cancel()
            await lock.release() if not lock.is_lost() else None
            raise
        if watch.done() or (lock.is_lost() and not task.done()):
            # A loss noticed together with the result wins, as in the library.
            task.cancel()
            await _asyncio.gather(task, return_exceptions=True)
            try:
                await lock.release()
            except LockLost:
                raise
            raise LockLost(f"lock on {resource!r} was lost before the work finished")
        watch.cancel()
        try:
            await lock.release()
        except LockLost:
            pass  # the work finished while the lock was ours; a later loss changes nothing
        return task.result()

    async def campaign(
        self, election: str, identity: str, ttl: Seconds, *, timeout: Optional[Seconds] = None
    ) -> Lock:
        """Campaigns until this candidate leads; returns the leadership, kept alive."""
        return await self._acquire(
            Request("campaign", election, ttl, timeout=timeout, identity=identity)
        )

    async def leader(self, election: str) -> Optional[Leader]:
        """Who leads ``election``; None when nobody does."""
        return await self._m.leader_async(election)

    def observe(self, election: str) -> LeaderWatch:
        """A watch of ``election``'s leader."""
        return LeaderWatch(self._m.observe(election))

    async def locked(self, resource: str) -> Optional[float]:
        """As ``redquorum.Redlock.locked``: seconds held at least, or ``None`` when free."""
        return await self._m.locked_async(resource)

    async def status(self, resource: str) -> List[NodeStatus]:
        """What each node holds for ``resource``."""
        return await self._m.status_async(resource)

    async def mark_nodes(
        self, force: bool = False, brand_new: bool = False
    ) -> List[Tuple[str, bool, str]]:
        """Vouches for servers as an operator, as the sync ``Redlock.mark_nodes``; returns
        (node, marked, what happened). Runs in a worker thread, so the event loop goes on
        meanwhile."""
        return await _asyncio.to_thread(self._m.mark_nodes, force, brand_new)
