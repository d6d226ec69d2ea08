"""What the blocking and the asyncio APIs share: everything but the waiting.

``redquorum`` and ``redquorum.asyncio`` offer the same calls, one on the caller's thread and
one awaited on the loop. What a call means is decided here, once: how its arguments are checked
and put into the native module's terms, what a lock handle reads and keeps alive, how a ``with``
block remembers its lock, what a failed release at a block's end raises. Each API module keeps
its public methods, with the signatures, types and docstrings its users read, and the wait
itself: a blocking call or an ``await``. A public method is written here only where it is the
same in both APIs to the letter (``Lock.keep_alive()``, ``Lock.fence``...). So a rule changed
here holds in both APIs at once, and the two cannot drift apart."""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
import math
from datetime import timedelta
from typing import (
    Any, Callable, Dict, Generic, Iterator, List, NoReturn, Optional, Sequence, Tuple, TypeVar,
    Union, overload,
)

from . import _redquorum
from .errors import ConfigError, LockLost, RedquorumError, Unavailable

Seconds = Union[float, int, timedelta]
Resources = Union[str, Sequence[str]]

T = TypeVar("T")
L = TypeVar("L", bound="LockBase")
Self = TypeVar("Self", bound="LockBase")  # what typing.Self says from Python 3.11 on

_log = logging.getLogger("redquorum")


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


class Request:
    """One acquisition as both APIs' ``acquire``, ``try_acquire``, ``acquire_read``,
    ``acquire_write`` and ``campaign`` ask for it: the arguments of the native
    ``Manager.acquire`` (or ``acquire_async``), checked, and what follows the grant. Each API's
    ``_acquire(request)`` only waits in between, so the two cannot disagree on what an argument
    means.

    The arguments every acquisition has come in the public methods' order, so that those
    methods pass them on in one line; the rarer ones by keyword. Built inside the call (for
    asyncio, once the coroutine runs), so a bad argument is raised where it was before: by the
    blocking call, or by the ``await``."""

    __slots__ = ("args", "kwargs", "_ttl", "_keep_alive")

    def __init__(
        self, kind: str, resource: Resources, ttl: Seconds, blocking: bool = True,
        timeout: Optional[Seconds] = None, keep_alive: bool = False, *,
        permits: Optional[int] = None, identity: Optional[str] = None,
    ) -> None:
        self.args = (kind, names(resource), ttl)
        self.kwargs = {"permits": permits, "identity": identity, **wait_args(blocking, timeout)}
        self._ttl = ttl
        self._keep_alive = keep_alive

    def granted(self, lock: L) -> L:
        """The lock the nodes granted, kept alive from now on if that was asked for."""
        if self._keep_alive:
            lock.keep_alive(self._ttl)
        return lock


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


class _FromHeld(Generic[T]):
    """A read-only attribute of a lock handle that is the native handle's attribute of the same
    name: it is read through, as a property would, under the docstring ``help()`` shows. One
    line per attribute in ``LockBase``, instead of a property each that only says the same."""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, lock: None, owner: Optional[type] = None) -> _FromHeld[T]: ...

    @overload
    def __get__(self, lock: LockBase, owner: Optional[type] = None) -> T: ...

    def __get__(self, lock: Optional[LockBase], owner: Optional[type] = None) -> Any:
        return self if lock is None else getattr(lock._held, self._name)

    def __set__(self, lock: LockBase, value: NoReturn) -> NoReturn:
        # Defined, as a property's is, so that the attribute is a data descriptor: read-only
        # on instances, and listed with its docstring by help().
        raise AttributeError(f"can't set attribute {self._name!r}")


class LockBase:
    """What both APIs' lock handles share: what is read from the native handle, the keep-alive,
    and the bookkeeping of ``lost``, none of which waits. ``redquorum.Lock`` and
    ``redquorum.asyncio.Lock`` add ``lost`` (a ``threading.Event`` or an ``asyncio.Event``),
    ``extend`` and ``release``, blocking or awaitable."""

    __slots__ = ("_held", "_lost")

    def __init__(self, held: Any) -> None:
        self._held = held
        self._lost: Any = None

    resource = _FromHeld[str](
        "The locked resource (the Redis key); for several, the first, sorted."
    )
    resources = _FromHeld[List[str]]("Every locked resource, sorted and without duplicates.")
    value = _FromHeld[str]("The random value that identifies this acquisition on the servers.")
    fence = _FromHeld[Optional[int]](
        """The fencing token: larger than every token handed out for this resource before.
        Pass it with every write to the protected resource, which must refuse a smaller one
        than the largest it has seen. ``None`` with ``fencing=False``."""
    )
    permit = _FromHeld[Optional[int]](
        "For a semaphore's permit, which one it is (``0 <= permit < permits``)."
    )
    is_read = _FromHeld[bool]("Whether this is a reader's hold on a read-write lock.")
    kept_alive = _FromHeld[bool](
        "Whether the lock is extended in the background (``keep_alive=True``)."
    )

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

    def keep_alive(
        self: Self,
        ttl: Optional[Seconds] = None,
        *,
        interval: Optional[Seconds] = None,
        margin: Optional[Seconds] = None,
        max_extensions: Optional[int] = None,
        max_hold: Optional[Seconds] = None,
    ) -> Self:
        """Extends the lock in the background from now on (every third of its validity by
        default) until released; a failed extension sets ``lost``. Returns the lock."""
        if ttl is None:
            raise ConfigError("keep_alive needs the ttl each extension sets")
        self._held.keep_alive(ttl, interval, margin, max_extensions, max_hold)
        return self

    def _released(self) -> None:
        """Sets ``lost`` once a release has ended, however it ended: at once, not when the
        background watcher gets the GIL or reaches the loop."""
        if self._lost is not None:
            self._lost.set()

    def __repr__(self) -> str:
        return repr(self._held)


@contextlib.contextmanager
def releasing_at_exit(lock: LockBase, failing: bool) -> Iterator[None]:
    """Around the release at the end of a ``with`` block (``failing``: the block raised):
    decides which of the release's errors the block raises, the same way in both APIs.

    Too few nodes answering within the release's patience (``Unavailable``) is logged, never
    raised, for a lock still valid when the block ended: it was ours for all its work, and what
    those nodes hold expires with its TTL (docs/python.md, "Releasing"). A lock whose validity
    had run out may have been taken meanwhile: ``LockLost``. An exception from the work wins
    over any of the release's; a lost lock after successful work is raised."""
    lost = lock.is_lost()  # before the release, which may wait for slow nodes
    try:
        yield
    except Unavailable as e:
        if not lost:
            _log.warning("%s: the work is done; what those nodes hold expires with its TTL", e)
        elif not failing:
            raise LockLost(
                f"lock on {lock.resource!r} ran out of validity before the block ended, and too "
                f"few nodes answered its release: the work may have overlapped another holder's "
                f"({e})"
            ) from e
    except RedquorumError:
        if not failing:
            raise


class ManagerBase:
    """What the two managers share: the settings (the Rust builder's, by keyword, in seconds),
    the nodes, the quorum and the quarantine, which need no I/O, and the making of the lock
    objects of ``with`` blocks. ``redquorum.Redlock`` (threads) and ``redquorum.asyncio.Redlock``
    add the calls, blocking or awaitable, and their context class."""

    #: The API's context class (``LockContext``, ``AsyncLockContext``): it calls what it is
    #: given when its block is entered.
    _context: Callable[[Callable[[], Any]], Any]

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

    def _later(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """What ``lock()``, ``read_lock()`` and ``write_lock()`` return: the API's context
        object, which calls the public ``method`` when its block is entered (and so checks the
        arguments then, as that call does). Looked up by name at each entry, so that a
        subclass's override, or a test's patch, is what runs."""
        return self._context(lambda: getattr(self, method)(*args, **kwargs))

    def _notice_quarantine(self) -> None:
        """Logs why an acquisition still waits, if nodes are quarantined, with the call that
        ends the wait where a mark is right."""
        text = self._m.quarantine_notice()
        if text:
            _log.warning("%s", text)

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


def entered(context: object, lock: L) -> L:
    """Records that this thread or task is inside `context`, holding `lock`; returns it."""
    _ENTERED.set(_ENTERED.get() + ((context, lock),))
    return lock


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
