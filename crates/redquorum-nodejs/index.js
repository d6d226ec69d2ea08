// @ts-check
/**
 * redquorum for Node.js: distributed locks on Redis (Redlock), with node-redlock's API.
 *
 * One file because it is the package's whole public face, as node-redlock's `index.js` is:
 * `Redlock`, `Lock`, the errors and the watches translate the same native handles.
 *
 * This file only translates. Every request to Redis, every vote count, every deadline and every
 * extension happens in the Rust library (the native addon, `native.js`), on a runtime of its
 * own threads: the event loop is never blocked, and nothing of the algorithm is written here.
 * What this file adds is the shape Node users expect: promises, `AbortSignal`s for cancellation
 * and loss, `using()` scopes, `Error` subclasses with node-redlock's names, leader changes as an
 * async iterator.
 *
 * @module redquorum
 */
'use strict'

const { EventEmitter } = require('node:events')
const native = require('./native.js')

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/**
 * One node's answer in the round that failed.
 * @typedef {object} NodeReply
 * @property {string} node The node's address, without credentials.
 * @property {string} reply What it answered (`granted`, `held by someone else`, `timed out`, …).
 * @property {boolean} granted Whether it granted.
 */

/**
 * An operation that did not reach a quorum: node-redlock's name for any failed acquisition,
 * extension or release. Every failure of a round is one of its subclasses, so
 * `catch (e) { if (e instanceof ExecutionError) … }` keeps working after a migration, and the
 * subclass says why (held by someone else, nodes down, quarantined, …).
 */
class ExecutionError extends Error {
  static errorName = 'ExecutionError'

  /**
   * @param {string} message
   * @param {Partial<import('./native.js').Detail>} [detail]
   */
  constructor (message, detail = {}) {
    super(message)
    // Each class's own name (`ResourceLockedError`, …), as node-redlock's errors print:
    // spelled out, so that a minifier that renames classes leaves it.
    this.name = /** @type {typeof ExecutionError} */ (new.target).errorName
    /** The resource (for several, sorted and joined by `, `). @type {string | undefined} */
    this.resource = detail.resource
    /** Why, in one word: `busy`, `unavailable`, `quarantined`, `wrong_type`, `too_slow`, `not_held`, … @type {string | undefined} */
    this.cause = detail.cause
    /** How many nodes make a quorum. @type {number | undefined} */
    this.quorum = detail.quorum
    /** How many rounds were tried. @type {number | undefined} */
    this.attemptCount = detail.attempts
    /** Every node's reply in the last round. @type {NodeReply[]} */
    this.replies = detail.replies ?? []
  }
}

/** The resource is held by someone else (node-redlock's name); a quorum refused for that reason. */
class ResourceLockedError extends ExecutionError {
  static errorName = 'ResourceLockedError'
}

/** Too few nodes gave an answer that counts (unreachable, timed out, an error reply): not "busy". */
class UnavailableError extends ExecutionError {
  static errorName = 'UnavailableError'
}

/**
 * Nodes that may have lost their data (a restart) granted, but sit out their quarantine; it
 * ends by itself (`readyIn` ms from the error), or an operator vouches for them (`markNodes`).
 */
class QuarantinedError extends ExecutionError {
  static errorName = 'QuarantinedError'

  /** @param {string} message @param {Partial<import('./native.js').Detail>} [detail] */
  constructor (message, detail = {}) {
    super(message, detail)
    /** How many nodes are quarantined. @type {number | undefined} */
    this.quarantinedNodes = detail.quarantinedNodes
    /** Milliseconds until enough of them vote again. @type {number | undefined} */
    this.readyIn = detail.readyInMs
  }
}

/** The resource's key holds another Redis type: it is not a lock, and retrying will not help. */
class WrongTypeError extends ExecutionError {
  static errorName = 'WrongTypeError'

  /** @param {string} message @param {Partial<import('./native.js').Detail>} [detail] */
  constructor (message, detail = {}) {
    super(message, detail)
    /** The node whose key is of another type. @type {string | undefined} */
    this.node = detail.node
  }
}

/** A quorum granted, but so late that no validity was left (nodes or network too slow). */
class TooSlowError extends ExecutionError {
  static errorName = 'TooSlowError'
}

/** An extension or a release found the lock not held with our value (expired, deleted, taken over, or released already). */
class NotHeldError extends ExecutionError {
  static errorName = 'NotHeldError'
}

/**
 * A lock that was held can no longer be relied on: an extension was refused or failed, its keys
 * were deleted, or its validity ran out. The reason of `lock.lost` and of `using()`'s signal.
 */
class LockLostError extends ExecutionError {
  static errorName = 'LockLostError'
}

/**
 * No fencing token could be issued for a lock: fewer than a quorum of the nodes that voted for
 * it still held it and answered in time, or its validity ran out first. The lock itself may
 * still be valid (`lock.isLost` says).
 */
class NotFencedError extends ExecutionError {
  static errorName = 'NotFencedError'
}

/** A setting or an argument the library refuses; nothing was sent to any server. */
class ConfigError extends RangeError {
  /** @param {string} message */
  constructor (message) {
    super(message)
    this.name = 'ConfigError'
  }
}

/** @type {Record<string, new (message: string, detail: any) => ExecutionError>} */
const CLASSES = {
  busy: ResourceLockedError,
  unavailable: UnavailableError,
  quarantined: QuarantinedError,
  wrong_type: WrongTypeError,
  too_slow: TooSlowError,
  not_held: NotHeldError,
  lost: LockLostError,
  not_fenced: NotFencedError
}

/**
 * The exception for a native failure.
 * @param {import('./native.js').Detail} detail
 * @returns {Error}
 */
function toError (detail) {
  if (detail.kind === 'config') return new ConfigError(detail.message)
  const Class = CLASSES[detail.kind] ?? ExecutionError
  return new Class(detail.message, detail)
}

/**
 * A native promise's value, or its failure thrown.
 * @template T
 * @param {Promise<any>} promise
 * @returns {Promise<T>}
 */
async function settled (promise) {
  return answer(await promise)
}

/**
 * A native answer, or its failure thrown: `settled` without a promise of its own, for the
 * calls of every lock cycle (one `async` frame fewer each).
 * @param {any} value
 * @returns {any}
 */
function answer (value) {
  if (value instanceof native.Failure) throw toError(value.detail)
  return value
}

/**
 * Runs a native call, rethrowing a refused argument as a `ConfigError`.
 * @template T
 * @param {() => T} call
 * @returns {T}
 */
function checked (call) {
  try {
    return call()
  } catch (e) {
    const code = e && typeof e === 'object' ? /** @type {any} */ (e).code : undefined
    if (code === 'InvalidArg') throw new ConfigError(/** @type {Error} */ (e).message)
    // napi-rs's conversions: a setting of the wrong type (`NumberExpected`, `StringExpected`, …).
    if (typeof code === 'string' && code.endsWith('Expected')) throw new TypeError(/** @type {Error} */ (e).message)
    throw e
  }
}

// ---------------------------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------------------------

/**
 * @param {unknown} value
 * @param {string} name
 * @returns {number}
 */
function millis (value, name) {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new TypeError(`${name} must be a non-negative number of milliseconds, got ${String(value)}`)
  }
  return value
}

/**
 * @param {unknown} resources
 * @returns {string[]}
 */
function resourceList (resources) {
  const list = typeof resources === 'string' ? [resources] : resources
  if (!Array.isArray(list) || list.some((r) => typeof r !== 'string')) {
    throw new TypeError('resources must be a string or an array of strings')
  }
  return list
}

/**
 * The server URLs, or a TypeError that says what node-redlock users must change.
 * @param {unknown} servers
 * @returns {string[]}
 */
function serverList (servers) {
  if (typeof servers === 'string') {
    // As the core splits a list: an entry without a scheme after a cluster's or a Sentinel
    // node's URL is one more of its seeds or sentinels.
    /** @type {string[]} */
    const urls = []
    for (const entry of servers.split(',').map((s) => s.trim()).filter(Boolean)) {
      /** @type {string | undefined} */
      const last = urls[urls.length - 1]
      if (!entry.includes('://') && last !== undefined && /^rediss?\+(cluster|sentinel):\/\//.test(last)) {
        urls[urls.length - 1] = `${last},${entry}`
      } else {
        urls.push(entry)
      }
    }
    return urls
  }
  if (Array.isArray(servers) && servers.every((s) => typeof s === 'string')) return servers
  throw new TypeError(
    'servers must be Redis URLs (an array of "redis://host:port" strings, or one comma-separated ' +
      'string), not client objects: redquorum keeps its own connection to each server'
  )
}

/**
 * node-redlock's per-call settings, and ours.
 * @typedef {object} Settings
 * @property {number} [driftFactor] Clock drift allowance, a fraction of the TTL (default 0.01). Manager only.
 * @property {number} [retryCount] Retries after the first attempt (default 10); -1: until acquired (or `maxWait`), unless three attempts in a row fail for anything but a held lock (nodes down, quarantined): then that error.
 * @property {number} [retryDelay] Base delay between attempts, ms (default 200). A release wakes waiters at once anyway (`notify`).
 * @property {number} [retryJitter] Added to the delay's upper bound, ms (default 100): each delay is drawn from [(delay+jitter)/2, delay+jitter].
 * @property {number} [automaticExtensionThreshold] `using()` extends at the latest when this much validity is left, ms (default 500); it extends every third of the validity anyway.
 * @property {number} [maxWait] Ours: an overall bound on an acquisition's wait, ms.
 * @property {AbortSignal} [signal] Ours: aborting it cancels a waiting acquisition, which rejects with `signal.reason`.
 */

/**
 * Our manager settings, on top of node-redlock's.
 * @typedef {object} ManagerSettings
 * @property {number} [nodeTimeout] How long one node may take to answer, ms (default 100).
 * @property {number} [connectTimeout] How long connecting to a node may take, ms (default 1000).
 * @property {number} [maxTtl] The longest TTL a lock may ask for, and a restarted node's quarantine, ms (default 60000).
 * @property {number} [lockDelay] How long a lock whose holder vanished stays unavailable after its TTL, ms (default 0).
 * @property {boolean} [quarantine] Whether nodes that may have lost their data sit out `maxTtl` (default true).
 * @property {boolean} [trustDurableNodes] Whether nodes with `appendfsync always` that kept their marker vote at once after a restart (default true).
 * @property {boolean} [trustFirstSight] Whether a group of long-running nodes seen for the first time votes at once (default false).
 * @property {boolean} [fencing] Whether every lock carries a fencing token (default true).
 * @property {number} [fenceRetention] How long a resource's fencing counter outlives its last lock, ms (default one day).
 * @property {boolean} [notify] Whether a release wakes waiters at once (default true).
 * @property {boolean} [fair] Whether waiters are served in arrival order (default false).
 * @property {boolean} [waitForReplicas] Whether a Redis Cluster node's vote waits for its replicas.
 * @property {string} [tlsRootCertificates] PEM root certificates for `rediss://` nodes.
 */

const MANAGER_KEYS = [
  'driftFactor', 'nodeTimeout', 'connectTimeout', 'maxTtl', 'lockDelay', 'quarantine',
  'trustDurableNodes', 'trustFirstSight', 'fencing', 'fenceRetention', 'notify', 'fair',
  'waitForReplicas', 'tlsRootCertificates'
]
const RETRY_KEYS = ['retryCount', 'retryDelay', 'retryJitter', 'maxWait', 'automaticExtensionThreshold']

/**
 * @param {Record<string, any> | undefined} settings
 * @param {string[]} keys
 */
function pick (settings, keys) {
  if (!settings) return undefined
  /** @type {Record<string, any> | undefined} */
  let picked
  for (const key of keys) {
    if (settings[key] !== undefined) (picked ??= {})[key] = settings[key]
  }
  return picked
}

// ---------------------------------------------------------------------------------------------
// Lock
// ---------------------------------------------------------------------------------------------

/**
 * A held lock (or semaphore permit, reader, writer, leadership). Ownership is the object:
 * whoever has it can extend or release it.
 */
/** How long an acquisition waits before it says why, if nodes are quarantined. */
const NOTICE_AFTER_MS = 1000

/** AbortSignal's own readers, which `Lock.lost` wraps. */
const ABORTED = /** @type {(this: AbortSignal) => boolean} */ (
  /** @type {PropertyDescriptor} */ (Object.getOwnPropertyDescriptor(AbortSignal.prototype, 'aborted')).get)
const REASON = /** @type {(this: AbortSignal) => any} */ (
  /** @type {PropertyDescriptor} */ (Object.getOwnPropertyDescriptor(AbortSignal.prototype, 'reason')).get)

class Lock {
  /**
   * @param {Redlock} redlock
   * @param {import('./native.js').Held} held
   * @param {boolean} keepProcessAlive
   */
  constructor (redlock, held, keepProcessAlive) {
    /** The manager that acquired it (node-redlock's `lock.redlock`). @type {Redlock} */
    this.redlock = redlock
    /** @private */
    this._held = held
    /** @private */
    this._keepProcessAlive = keepProcessAlive
    /** @private @type {(AbortSignal & { error?: Error }) | undefined} */
    this._lost = undefined
  }

  /**
   * Aborts when the lock is lost (not when it is released), with a `LockLostError` as its
   * `reason` (and `error`, as node-redlock's `using()` signal): validity run out, an
   * extension refused, keys found deleted. Stop relying on the lock then. Watched from the
   * first time it is read (a lock already lost aborts it at once). `aborted`, `reason` and
   * `throwIfAborted()` read the clock too, so a check between steps is never late, however
   * long the event loop was busy; an `abort` listener runs when the loop gets to it.
   * @returns {AbortSignal & { error?: Error }}
   */
  get lost () {
    if (this._lost === undefined) {
      const controller = new AbortController()
      const signal = /** @type {AbortSignal & { error?: Error }} */ (controller.signal)
      const held = this._held
      /** @param {import('./native.js').Failure} failure */
      const abort = (failure) => {
        if (ABORTED.call(signal)) return // the first word on a loss is kept
        const error = toError(failure.detail)
        signal.error = error
        controller.abort(error)
      }
      // Read the clock whenever the signal is read (held.rs invariant 4): the watcher's call
      // waits behind whatever keeps the event loop busy, the keys' expiry does not.
      const settle = () => {
        if (ABORTED.call(signal)) return
        const failure = held.lossNow()
        if (failure) abort(failure)
      }
      Object.defineProperties(signal, {
        aborted: { get () { settle(); return ABORTED.call(signal) } },
        reason: { get () { settle(); return REASON.call(signal) } },
        throwIfAborted: { value () { settle(); AbortSignal.prototype.throwIfAborted.call(signal) } }
      })
      this._lost = signal
      held.onLost(abort, this._keepProcessAlive)
    }
    return this._lost
  }

  /** The random value that identifies this acquisition. @returns {string} */
  get value () { return this._held.value }
  /** Every locked resource, sorted. @returns {string[]} */
  get resources () { return this._held.resources }
  /** When the lock counts as lost, in ms since the epoch (node-redlock's `expiration`). @returns {number} */
  get expiration () { return this._held.expiration }
  /** Milliseconds left before the lock counts as lost; 0 once it is. @returns {number} */
  get remaining () { return this._held.remaining }
  /**
   * The fencing token: strictly greater than every earlier acquisition's of the resource, and
   * smaller than every later one's. Issued on the first call (one round trip to the nodes that
   * voted for the lock) and kept, so a lock nobody fences costs nothing; read-write holds and
   * leaderships have theirs from the start. Ask while the lock is held, before the protected
   * writes: a holder whose lock was taken over gets `NotFencedError`, never a token newer than
   * its successor's. Throws `ConfigError` with `fencing: false`.
   * @returns {Promise<bigint>}
   */
  async fence () {
    const issued = this._held.issuedFence
    if (issued !== null && issued !== undefined) return issued
    return /** @type {bigint} */ (await settled(this._held.issueFence()))
  }
  /** For a semaphore's permit, its index; otherwise null. @returns {number | null} */
  get permit () { return this._held.permit }
  /** Whether this is a reader's hold on a read-write lock. @returns {boolean} */
  get isRead () { return this._held.isRead }
  /** Whether the lock may no longer be relied on. Final. @returns {boolean} */
  get isLost () { return this._held.isLost }

  /**
   * Resets the TTL to `duration` ms from now on the nodes that still hold the lock. Resolves
   * with this lock (node-redlock 5 resolves with a new one: `lock = await lock.extend(d)`
   * works with both). An extension never brings back a lock already lost.
   * @param {number} duration
   * @returns {Promise<Lock>}
   */
  async extend (duration) {
    const ttl = millis(duration, 'duration')
    await settled(checked(() => this._held.extend(ttl)))
    return this
  }

  /**
   * Releases the lock on every node. Resolves with how many nodes confirmed; throws
   * `NotHeldError` when a quorum did not hold it any more (it had expired), or
   * `LockLostError` for a kept-alive lock that was lost before.
   * @returns {Promise<{ confirmed: number }>}
   */
  async release () {
    const confirmed = answer(await this._held.release())
    return { confirmed: /** @type {number} */ (confirmed) }
  }
}

// ---------------------------------------------------------------------------------------------
// Redlock
// ---------------------------------------------------------------------------------------------

/**
 * The manager: one connection per server, shared by every lock. node-redlock's `Redlock`, with
 * URLs instead of client objects.
 */
class Redlock extends EventEmitter {
  /**
   * @param {string[] | string} servers Redis URLs (`redis://[user:password@]host:port[/db]`, `rediss://…`, `redis+cluster://seed,…`, `redis+sentinel://sentinel,…/SERVICE`), or one comma-separated string.
   * @param {Settings & ManagerSettings} [settings]
   */
  constructor (servers, settings = {}) {
    super()
    if (settings === null || typeof settings !== 'object') throw new TypeError('settings must be an object')
    /** The settings given, node-redlock's and ours. @type {Readonly<Settings & ManagerSettings>} */
    this.settings = Object.freeze({ ...settings })
    /** @private */
    this._native = checked(() => new native.Manager(
      serverList(servers), pick(settings, MANAGER_KEYS), pick(settings, RETRY_KEYS)))
  }

  /** The nodes' addresses, without credentials. @returns {string[]} */
  get nodes () { return this._native.nodes }
  /** How many nodes must grant a request. @returns {number} */
  get quorum () { return this._native.quorum }

  /**
   * @private
   * @param {string[]} resources
   * @param {number} ttl
   * @param {Settings | undefined} settings
   * @param {import('./native.js').Request | undefined} request
   * @returns {Promise<Lock>}
   */
  async _acquire (resources, ttl, settings, request) {
    if (settings !== undefined && (settings === null || typeof settings !== 'object')) {
      throw new TypeError('settings must be an object')
    }
    const signal = settings?.signal
    signal?.throwIfAborted()
    const canceller = signal ? new native.Canceller() : undefined
    const abort = () => canceller?.cancel()
    signal?.addEventListener('abort', abort, { once: true })
    // A wait of a second or more for quarantined nodes says so once, with the call that ends
    // it where a mark is right (the library gives up at once on a quarantine its attempts
    // cannot outlast; a long retryCount waits).
    const notice = setTimeout(() => this._noticeQuarantine(), NOTICE_AFTER_MS)
    notice.unref()
    try {
      const held = answer(await checked(() => this._native.acquire(
        resources, ttl, request, pick(settings, RETRY_KEYS), canceller)))
      return new Lock(this, /** @type {import('./native.js').Held} */ (held), Boolean(request?.keepAlive))
    } catch (e) {
      if (signal?.aborted) throw signal.reason
      throw e
    } finally {
      clearTimeout(notice)
      signal?.removeEventListener('abort', abort)
    }
  }

  /** @private */
  _noticeQuarantine () {
    let notice
    try {
      notice = this._native.quarantineNotice()
    } catch {
      return // closed by quit() meanwhile: the acquisition itself says so
    }
    if (notice) process.emitWarning(notice, { code: 'REDQUORUM_QUARANTINE' })
  }

  /**
   * Acquires a lock on every resource at once (all or nothing), valid for `duration` ms.
   * With `settings.permits`, a semaphore: one of that many permits on one resource.
   * @param {string[] | string} resources
   * @param {number} duration
   * @param {Settings & { permits?: number }} [settings]
   * @returns {Promise<Lock>}
   * @throws {ResourceLockedError} held by someone else for the whole retry window
   * @throws {UnavailableError | QuarantinedError | WrongTypeError | TooSlowError} other reasons a quorum did not grant
   */
  async acquire (resources, duration, settings) {
    const permits = settings?.permits
    return this._acquire(resourceList(resources), millis(duration, 'duration'), settings,
      permits === undefined ? undefined : { permits })
  }

  /**
   * A reader's hold on a read-write lock: readers together, a writer alone (and never starved).
   * @param {string} resource
   * @param {number} duration
   * @param {Settings} [settings]
   * @returns {Promise<Lock>}
   */
  async acquireRead (resource, duration, settings) {
    return this._acquire(resourceList(resource), millis(duration, 'duration'), settings, { kind: 'read' })
  }

  /**
   * A writer's hold on a read-write lock: alone, once the readers have left.
   * @param {string} resource
   * @param {number} duration
   * @param {Settings} [settings]
   * @returns {Promise<Lock>}
   */
  async acquireWrite (resource, duration, settings) {
    return this._acquire(resourceList(resource), millis(duration, 'duration'), settings, { kind: 'write' })
  }

  /**
   * Releases `lock` (node-redlock's `redlock.release(lock)`).
   * @param {Lock} lock
   * @returns {Promise<{ confirmed: number }>}
   */
  async release (lock) {
    return lock.release()
  }

  /**
   * Extends `lock` (node-redlock's `redlock.extend(lock, duration)`).
   * @param {Lock} lock
   * @param {number} duration
   * @returns {Promise<Lock>}
   */
  async extend (lock, duration) {
    return lock.extend(duration)
  }

  /**
   * Runs `routine` under a lock kept alive in the background, then releases it.
   *
   * `signal` aborts, with `signal.error` (and `signal.reason`) a `LockLostError`, on any loss:
   * an extension refused, the keys deleted, the validity run out. The routine must stop then.
   * If the routine finished but the lock had been lost meanwhile, `using()` throws that error:
   * the work ran, at least partly, without the lock.
   *
   * @template T
   * @param {string[] | string} resources
   * @param {number} duration
   * @param {Settings | ((signal: AbortSignal & { error?: Error }) => Promise<T>)} settingsOrRoutine
   * @param {(signal: AbortSignal & { error?: Error }) => Promise<T>} [routine]
   * @returns {Promise<T>}
   */
  async using (resources, duration, settingsOrRoutine, routine) {
    /** @type {Settings | undefined} */
    let settings
    if (typeof settingsOrRoutine === 'function') {
      routine = settingsOrRoutine
    } else {
      settings = settingsOrRoutine
    }
    if (typeof routine !== 'function') throw new TypeError('using() needs a routine: using(resources, duration, [settings], async (signal) => …)')
    const lock = await this._acquire(resourceList(resources), millis(duration, 'duration'), settings, { keepAlive: true })
    let result
    try {
      result = await routine(lock.lost)
    } catch (e) {
      await lock.release().catch(() => {})
      throw e
    }
    await lock.release().catch((e) => {
      if (!lock.lost.aborted) throw e
    })
    if (lock.lost.aborted) throw lock.lost.reason
    return result
  }

  /**
   * Campaigns in `election` as `identity`, resolving once elected. The leadership is kept alive
   * in the background; `lock.lost` aborts when it is lost, `await lock.fence()` is the term (strictly
   * greater than every earlier leader's), `lock.release()` steps down.
   * @param {string} election
   * @param {string} identity
   * @param {number} duration
   * @param {Settings} [settings]
   * @returns {Promise<Lock>}
   */
  async campaign (election, identity, duration, settings) {
    if (typeof identity !== 'string') throw new TypeError('identity must be a string')
    return this._acquire(resourceList(election), millis(duration, 'duration'), settings, { kind: 'campaign', identity })
  }

  /**
   * The leader of `election`, as a majority of nodes report it; null when nobody leads.
   * @param {string} election
   * @returns {Promise<import('./native.js').Leader | null>}
   */
  async leader (election) {
    return settled(this._native.leader(resourceList(election)[0]))
  }

  /**
   * Each change of `election`'s leader (the current one first), until `signal` aborts or the
   * loop is left: `for await (const leader of redlock.observe('jobs')) …`; null when nobody leads.
   * @param {string} election
   * @param {{ signal?: AbortSignal }} [options]
   * @returns {AsyncGenerator<import('./native.js').Leader | null>}
   */
  async * observe (election, options = {}) {
    const watch = checked(() => this._native.observe(resourceList(election)[0]))
    const close = () => watch.close()
    options.signal?.addEventListener('abort', close, { once: true })
    try {
      while (!options.signal?.aborted) {
        const change = /** @type {import('./native.js').LeaderChange} */ (await settled(watch.changed()))
        if (change.closed) return
        yield change.leader ?? null
      }
    } finally {
      options.signal?.removeEventListener('abort', close)
      watch.close()
    }
  }

  /**
   * Who holds `resource`, node by node (no quorum asked).
   * @param {string} resource
   * @returns {Promise<import('./native.js').NodeStatus[]>}
   */
  async status (resource) {
    return settled(this._native.status(resourceList(resource)[0]))
  }

  /**
   * Whether a quorum holds `resource` now: its holder (value and milliseconds it stays held at
   * least), or null when free.
   * @param {string} resource
   * @returns {Promise<import('./native.js').Holder | null>}
   * @throws {UnavailableError} too few nodes answered to tell
   */
  async locked (resource) {
    return settled(this._native.locked(resourceList(resource)[0]))
  }

  /**
   * Vouches, as an operator, that the nodes lost nothing (ends a restart quarantine).
   * `brandNew`: they are new and empty; `force`: mark whatever the checks say.
   * @param {{ force?: boolean, brandNew?: boolean }} [options]
   * @returns {Promise<import('./native.js').NodeMark[]>}
   */
  async markNodes (options = {}) {
    return settled(this._native.markNodes(Boolean(options.force), Boolean(options.brandNew)))
  }

  /**
   * The nodes in quarantine now, each with why and for how long.
   * @returns {string[]}
   */
  quarantinedNodes () {
    return this._native.quarantinedNodes()
  }

  /**
   * Closes the manager: waits for requests still in flight; its connections close once no lock
   * of it is held. Further calls throw.
   * @returns {Promise<void>}
   */
  async quit () {
    await settled(this._native.quit())
  }
}

module.exports = Redlock
module.exports.default = Redlock
module.exports.Redlock = Redlock
module.exports.Lock = Lock
module.exports.ExecutionError = ExecutionError
module.exports.ResourceLockedError = ResourceLockedError
module.exports.UnavailableError = UnavailableError
module.exports.QuarantinedError = QuarantinedError
module.exports.WrongTypeError = WrongTypeError
module.exports.TooSlowError = TooSlowError
module.exports.NotHeldError = NotHeldError
module.exports.LockLostError = LockLostError
module.exports.NotFencedError = NotFencedError
module.exports.ConfigError = ConfigError
