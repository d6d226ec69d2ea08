// The lock itself, through node-redlock's API: exclusion among async contenders, fencing
// tokens, extension, release, the typed errors, cancellation by AbortSignal, quit().
import { after, before, test } from 'node:test'
import assert from 'node:assert/strict'
import Redlock, {
  ConfigError, ExecutionError, LockLostError, NotFencedError, NotHeldError, ResourceLockedError,
  UnavailableError, WrongTypeError
} from '../index.mjs'
import { Nodes, PATIENT, name, sleep } from './helpers.mjs'

let nodes
let redlock
before(() => {
  nodes = new Nodes(3)
  redlock = new Redlock(nodes.urls, { ...PATIENT, retryDelay: 20, retryJitter: 10, retryCount: -1 })
})
after(async () => {
  await redlock?.quit()
  nodes?.stop()
})

test('8 async contenders: exclusion, an exact counter, strictly increasing fences', async () => {
  const resource = name()
  let counter = 0
  let inside = 0
  let most = 0
  const fences = []
  const rounds = 10
  await Promise.all(Array.from({ length: 8 }, async () => {
    for (let i = 0; i < rounds; i++) {
      const lock = await redlock.acquire([resource], 5000)
      inside += 1
      most = Math.max(most, inside)
      fences.push(await lock.fence())
      const seen = counter
      await sleep(1) // another contender runs here, if the lock let it in
      counter = seen + 1
      inside -= 1
      await lock.release()
    }
  }))
  assert.equal(counter, 8 * rounds)
  assert.equal(most, 1)
  assert.equal(fences.length, 8 * rounds)
  for (let i = 1; i < fences.length; i++) {
    assert.equal(typeof fences[i], 'bigint')
    assert.ok(fences[i] > fences[i - 1], `fence ${i}: ${fences[i]} after ${fences[i - 1]}`)
  }
})

test('a token on request: kept once issued, refused to a holder whose lock was taken over', async () => {
  const resource = name()
  const lock = await redlock.acquire([resource], 10_000)
  const token = await lock.fence()
  assert.equal(await lock.fence(), token, 'asked again: the same token')
  await lock.release()
  // A holder whose keys are gone (expired, taken over) gets no token, whatever its own clock says.
  const late = await redlock.acquire([resource], 10_000)
  const clients = nodes.clients()
  try {
    await Promise.all(clients.map((c) => c.del(resource)))
  } finally {
    clients.forEach((c) => c.disconnect())
  }
  const next = await redlock.acquire([resource], 10_000)
  const nextToken = await next.fence()
  assert.ok(nextToken > token, `${nextToken} after ${token}`)
  await assert.rejects(late.fence(), (e) => e instanceof NotFencedError && e instanceof ExecutionError)
  await next.release()
  await assert.rejects(late.release(), NotHeldError)
})

test('a lock: value, resources, expiration, extend, release', async () => {
  const resource = name()
  const before = Date.now()
  const lock = await redlock.acquire([resource], 10_000)
  assert.match(lock.value, /^[0-9a-f]{20,}/)
  assert.deepEqual(lock.resources, [resource])
  assert.ok(lock.expiration > before && lock.expiration <= Date.now() + 10_000)
  assert.equal(lock.lost.aborted, false)
  const extended = await lock.extend(30_000)
  assert.equal(extended, lock)
  assert.ok(lock.remaining > 10_000, `remaining ${lock.remaining} after extending to 30 s`)
  assert.equal((await redlock.locked(resource)).value, lock.value)
  const { confirmed } = await lock.release()
  assert.equal(confirmed, 3)
  assert.equal(await redlock.locked(resource), null)
  await assert.rejects(lock.release(), NotHeldError)
  await assert.rejects(lock.extend(1000), NotHeldError)
  assert.equal(lock.lost.aborted, false, 'a release is no loss')
})

test('several resources at once, all or nothing', async () => {
  const [a, b, c] = [name(), name(), name()]
  const ab = await redlock.acquire([a, b], 10_000)
  assert.deepEqual(ab.resources, [a, b].sort())
  await assert.rejects(redlock.acquire([b, c], 10_000, { retryCount: 0 }), ResourceLockedError)
  assert.equal(await redlock.locked(c), null, 'c was not taken by the refused set')
  await ab.release()
  const bc = await redlock.acquire([b, c], 10_000, { retryCount: 0 })
  await bc.release()
})

test('busy: ResourceLockedError, an ExecutionError with every node\'s reply', async () => {
  const resource = name()
  const lock = await redlock.acquire([resource], 10_000)
  const error = await redlock.acquire([resource], 10_000, { retryCount: 2, retryDelay: 10, retryJitter: 0 })
    .then(() => null, (e) => e)
  assert.ok(error instanceof ResourceLockedError, String(error))
  assert.ok(error instanceof ExecutionError)
  assert.ok(error instanceof Error)
  assert.equal(error.resource, resource)
  assert.equal(error.quorum, 2)
  assert.equal(error.attemptCount, 3)
  assert.equal(error.replies.length, 3)
  assert.deepEqual(error.replies.map((r) => r.node).sort(), nodes.urls.map((u) => u.replace('redis://', '')).sort())
  assert.ok(error.replies.every((r) => !r.granted))
  await lock.release()
})

test('unreachable nodes: UnavailableError, not busy; no password in messages', async () => {
  const dead = new Redlock(['redis://:s3cret@127.0.0.1:1', 'redis://:s3cret@127.0.0.1:2', nodes.urls[0]],
    { ...PATIENT, connectTimeout: 200 })
  const error = await dead.acquire([name()], 5000, { retryCount: 0 }).then(() => null, (e) => e)
  assert.ok(error instanceof UnavailableError, String(error))
  assert.ok(!error.message.includes('s3cret'), error.message)
  assert.ok(!dead.nodes.join().includes('s3cret'))
  await dead.quit()
})

test('a key of another type: WrongTypeError naming the node', async () => {
  const resource = name()
  const clients = nodes.clients()
  try {
    await Promise.all(clients.map((c) => c.rpush(resource, 'x')))
    const error = await redlock.acquire([resource], 5000, { retryCount: 0 }).then(() => null, (e) => e)
    assert.ok(error instanceof WrongTypeError, String(error))
    assert.ok(nodes.urls.some((u) => u.endsWith(error.node)), error.node)
  } finally {
    await Promise.all(clients.map((c) => c.del(resource).finally(() => c.quit())))
  }
})

test('bad input: TypeError or ConfigError (a RangeError) at once, never a crash', async () => {
  assert.throws(() => new Redlock([{ host: 'x' }]), TypeError)
  assert.throws(() => new Redlock(['not a url']), ConfigError)
  assert.throws(() => new Redlock(['redis://:s3cret@127.0.0.1:notaport']),
    (e) => e instanceof ConfigError && !e.message.includes('s3cret') && e.message.includes('127.0.0.1'))
  assert.throws(() => new Redlock(nodes.urls, { driftFactor: 5 }), RangeError)
  assert.throws(() => new Redlock(nodes.urls, { retryCount: -5 }), ConfigError)
  assert.throws(() => new Redlock(nodes.urls, { nodeTimeout: Number.NaN }), ConfigError)
  await assert.rejects(redlock.acquire([name()], -1), TypeError)
  await assert.rejects(redlock.acquire([name()], 'soon'), TypeError)
  await assert.rejects(redlock.acquire([], 1000), ConfigError)
  await assert.rejects(redlock.acquire([name()], 10 * 60 * 60 * 1000), ConfigError) // beyond maxTtl
  await assert.rejects(redlock.acquire(name(), 1000, { permits: 0 }), ConfigError)
  await assert.rejects(redlock.acquire([name()], 1000, { retryDelay: -1 }), ConfigError)
  await assert.rejects(redlock.acquire([name()], 1000, { retryDelay: 'soon' }), TypeError)
  await assert.rejects(redlock.acquire(name(), 1000, { permits: 'two' }), TypeError)
  assert.throws(() => new Redlock(nodes.urls, { fair: 'yes' }), TypeError)
})

test('settings.signal cancels a waiting acquisition; the lock it waited for is untouched', async () => {
  const resource = name()
  const lock = await redlock.acquire([resource], 20_000)
  const controller = new AbortController()
  const waiting = redlock.acquire([resource], 5000, { signal: controller.signal })
  await sleep(200)
  const reason = new Error('no longer needed')
  controller.abort(reason)
  await assert.rejects(waiting, (e) => e === reason)
  assert.equal((await redlock.locked(resource)).value, lock.value)
  await assert.rejects(redlock.acquire([resource], 5000, { signal: AbortSignal.abort() }), { name: 'AbortError' })
  await lock.release()
})

test('an unextended lock aborts lock.lost once its validity runs out', async () => {
  const lock = await redlock.acquire([name()], 300)
  // The loss watch does not hold the event loop open (as AbortSignal.timeout's timer does not):
  // the test does, while it waits.
  const open = setTimeout(() => {}, 30_000)
  const reason = await new Promise((resolve) => lock.lost.addEventListener('abort', () => resolve(lock.lost.reason)))
  clearTimeout(open)
  assert.equal(reason.name, 'LockLostError')
  assert.equal(reason.cause, 'validity_ran_out')
  assert.equal(lock.isLost, true)
})

test('lock.lost reads the clock: never unaborted once the keys are gone, however busy the loop', async () => {
  const resource = name()
  const lock = await redlock.acquire([resource], 300)
  const lost = lock.lost
  const released = await redlock.acquire([name()], 300)
  const kept = released.lost
  await released.release()
  assert.equal(lost.aborted, false)
  // The event loop runs nothing else past the deadline and the keys' expiry: the watcher's
  // call waits in its queue.
  const end = Date.now() + 600
  while (Date.now() < end) { /* busy */ }
  assert.equal(lost.aborted, true, 'aborted when read, before the watcher ran')
  assert.equal(lost.reason.name, 'LockLostError')
  assert.equal(lost.reason.cause, 'validity_ran_out')
  assert.equal(lost.error, lost.reason)
  assert.throws(() => lost.throwIfAborted(), LockLostError)
  assert.equal(kept.aborted, false, 'a lock released in time is not lost by the clock')
  const clients = nodes.clients()
  try {
    const held = await Promise.all(clients.map((r) => r.exists(resource)))
    assert.deepEqual(held, [0, 0, 0], 'setup: the keys expired')
  } finally {
    clients.forEach((r) => r.disconnect())
  }
})

test('a lock whose own extension found it gone: lock.lost says why, not "validity ran out"', async () => {
  const resource = name()
  const lock = await redlock.acquire([resource], 10_000)
  // The watcher, woken by the failed extension on another thread, must find the reason recorded.
  const heard = new Promise((resolve) => lock.lost.addEventListener('abort', () => resolve(lock.lost.reason)))
  // The loss watch does not hold the event loop open: the test does, while it waits.
  const open = setTimeout(() => {}, 30_000)
  const clients = nodes.clients()
  try {
    await Promise.all(clients.map((c) => c.del(resource))) // somebody deletes our keys
  } finally {
    clients.forEach((c) => c.disconnect())
  }
  await assert.rejects(lock.extend(10_000), NotHeldError)
  const reason = await heard
  clearTimeout(open)
  assert.notEqual(reason.cause, 'validity_ran_out', 'the watcher heard why')
  assert.equal(lock.lost.aborted, true)
  assert.equal(lock.lost.reason.name, 'LockLostError')
  assert.notEqual(lock.lost.reason.cause, 'validity_ran_out', lock.lost.reason.message)
  assert.match(lock.lost.reason.message, /is lost: extension failed/)
})

test('quit() closes the manager', async () => {
  const own = new Redlock(nodes.urls, PATIENT)
  const lock = await own.acquire([name()], 5000)
  await lock.release()
  await own.quit()
  await assert.rejects(own.acquire([name()], 5000), ConfigError)
})

test('an expired lock: release fails at once (no retry window), extend never brings it back', async () => {
  const resource = name()
  const lock = await redlock.acquire([resource], 200)
  await sleep(500)
  const asked = Date.now()
  await assert.rejects(lock.release(), NotHeldError)
  assert.ok(Date.now() - asked < 5000, 'a release does not retry')
  const again = await redlock.acquire([resource], 200)
  await sleep(500)
  await assert.rejects(again.extend(10_000), LockLostError)
  assert.equal(await redlock.locked(resource), null, 'not re-taken by the extension')
})

test('lock-delay: a lock nobody released stays taken for the delay; a released one is free at once', async () => {
  const delayed = new Redlock(nodes.urls, { ...PATIENT, lockDelay: 1500, retryCount: 0 })
  const [vanished, released] = [name(), name()]
  await delayed.acquire([vanished], 300) // its holder "vanishes": never released
  // Released well within its validity (a release in its last node timeout counts as late).
  await (await delayed.acquire([released], 5000)).release()
  await sleep(700) // past the first one's TTL, within its delay
  await assert.rejects(delayed.acquire([vanished], 5000), ResourceLockedError)
  const free = await delayed.acquire([released], 5000)
  await free.release()
  const later = await delayed.acquire([vanished], 5000, { retryCount: -1, maxWait: 15_000 })
  await later.release()
  await delayed.quit()
})
