// Every primitive beyond the plain lock: semaphores, read-write locks, elections (campaign,
// leader, observe), status, locked, markNodes, fair waiting.
import { after, before, test } from 'node:test'
import assert from 'node:assert/strict'
import Redlock, { QuarantinedError, ResourceLockedError } from '../index.mjs'
import { Nodes, PATIENT, name, sleep } from './helpers.mjs'

let nodes
let redlock
before(() => {
  nodes = new Nodes(3)
  redlock = new Redlock(nodes.urls, { ...PATIENT, retryCount: 0 })
})
after(async () => {
  await redlock?.quit()
  nodes?.stop()
})

test('semaphore: at most `permits` holders, each with its own permit', async () => {
  const resource = name()
  const held = await Promise.all([0, 1, 2].map(() => redlock.acquire(resource, 10_000, { permits: 3 })))
  assert.deepEqual(held.map((l) => l.permit).sort(), [0, 1, 2])
  await assert.rejects(redlock.acquire(resource, 10_000, { permits: 3 }), ResourceLockedError)
  await held[1].release()
  const again = await redlock.acquire(resource, 10_000, { permits: 3 })
  assert.equal(again.permit, held[1].permit)
  await Promise.all([held[0], held[2], again].map((l) => l.release()))
})

test('read-write lock: readers together, a writer alone', async () => {
  const resource = name()
  const r1 = await redlock.acquireRead(resource, 10_000)
  const r2 = await redlock.acquireRead(resource, 10_000)
  assert.equal(r1.isRead, true)
  assert.equal((await redlock.locked(resource)).readers, true)
  await assert.rejects(redlock.acquireWrite(resource, 10_000), ResourceLockedError)
  await r1.release()
  await r2.release()
  const w = await redlock.acquireWrite(resource, 10_000)
  assert.equal(w.isRead, false)
  await assert.rejects(redlock.acquireRead(resource, 10_000), ResourceLockedError)
  const [wf, rf] = [await w.fence(), await r2.fence()]
  assert.ok(wf > rf, `writer's fence ${wf} after the readers' ${rf}`)
  await w.release()
})

test('election: campaign, leader, observe, step down', async () => {
  const election = name('election')
  const changes = []
  const stop = new AbortController()
  const seen = (async () => {
    for await (const leader of redlock.observe(election, { signal: stop.signal })) {
      changes.push(leader?.identity ?? null)
      if (leader?.identity === 'node-b') break
    }
  })()
  const a = await redlock.campaign(election, 'node-a', 2000)
  assert.equal(typeof (await a.fence()), 'bigint')
  await assert.rejects(redlock.campaign(election, 'node-b', 2000), ResourceLockedError)
  const leader = await redlock.leader(election)
  assert.equal(leader.identity, 'node-a')
  assert.equal(leader.term, await a.fence())
  await sleep(2500) // beyond the TTL: the leadership is kept alive
  assert.equal((await redlock.leader(election)).identity, 'node-a')
  assert.equal(a.lost.aborted, false)
  await a.release()
  const b = await redlock.campaign(election, 'node-b', 2000)
  const [bt, at] = [await b.fence(), await a.fence()]
  assert.ok(bt > at, `term ${bt} after ${at}`)
  const open = setTimeout(() => {}, 30_000)
  await Promise.race([seen, sleep(20_000)])
  clearTimeout(open)
  stop.abort()
  await b.release()
  // The observer saw node-a lead, then node-b.
  assert.ok(changes.includes('node-a'), JSON.stringify(changes))
  assert.equal(changes.at(-1), 'node-b', JSON.stringify(changes))
  assert.ok(changes.indexOf('node-a') < changes.indexOf('node-b'), JSON.stringify(changes))
})

test('status and locked', async () => {
  const resource = name()
  assert.equal(await redlock.locked(resource), null)
  assert.ok((await redlock.status(resource)).every((s) => s.state === 'free'))
  const lock = await redlock.acquire(resource, 10_000)
  const status = await redlock.status(resource)
  assert.equal(status.length, 3)
  assert.ok(status.every((s) => s.state === 'held' && s.value === lock.value && s.ttl > 0), JSON.stringify(status))
  const holder = await redlock.locked(resource)
  assert.equal(holder.value, lock.value)
  assert.ok(holder.remaining > 0 && holder.remaining <= 10_000)
  await lock.release()
  assert.equal(await redlock.locked(resource), null)
})

test('quarantine: QuarantinedError says when it ends; markNodes vouches for brand-new nodes', async () => {
  const fresh = new Nodes(3)
  const clients = fresh.clients()
  try {
    await Promise.all(clients.map((c) => c.del('redlock-node-marker'))) // as if seen by no client yet
    const own = new Redlock(fresh.urls, { ...PATIENT, maxTtl: 30_000, trustDurableNodes: false, retryCount: 0 })
    const error = await own.acquire(name(), 5000).then(() => null, (e) => e)
    assert.ok(error instanceof QuarantinedError, String(error))
    assert.ok(error.readyIn > 0 && error.readyIn <= 30_000, String(error.readyIn))
    assert.equal(own.quarantinedNodes().length, 3)
    // Just started: refused unless the operator says they are brand new.
    const refused = await own.markNodes()
    assert.ok(refused.every((m) => !m.marked && m.detail.includes('--brand-new')), JSON.stringify(refused))
    const marks = await own.markNodes({ brandNew: true })
    assert.deepEqual(marks.map((m) => m.node).sort(), own.nodes.slice().sort())
    assert.ok(marks.every((m) => m.marked), JSON.stringify(marks))
    const lock = await own.acquire(name(), 5000, { retryCount: -1, maxWait: 15_000 }) // trusted at the next health check
    await lock.release()
    await own.quit()
  } finally {
    await Promise.all(clients.map((c) => c.quit()))
    fresh.stop()
  }
})

test('a first lock on a new server: QuarantinedError at once with the call that ends the wait; a long wait warns', async () => {
  const fresh = new Nodes(1)
  const clients = fresh.clients()
  try {
    await Promise.all(clients.map((c) => c.del('redlock-node-marker'))) // as if seen by no client yet
    const own = new Redlock(fresh.urls, PATIENT) // the defaults: retryCount 10
    const error = await own.acquire(name(), 5000).then(() => null, (e) => e)
    assert.ok(error instanceof QuarantinedError, String(error))
    assert.match(error.message, /after 1 attempt\(s\)/, 'not waited for')
    assert.ok(error.message.includes('end the wait at once with await redlock.markNodes({ brandNew: true }) (never after a restart'), error.message)
    // Attempts enough to outlast the quarantine: waited for, and a warning says why.
    const warnings = []
    const onWarning = (w) => { if (w.code === 'REDQUORUM_QUARANTINE') warnings.push(w.message) }
    process.on('warning', onWarning)
    try {
      const waited = await own.acquire(name(), 5000, { retryCount: 100, signal: AbortSignal.timeout(2500) })
        .then(() => null, (e) => e)
      assert.equal(waited?.name, 'TimeoutError', String(waited))
    } finally {
      process.off('warning', onWarning)
    }
    assert.ok(warnings.some((w) => w.includes('waiting for quarantined nodes') && w.includes('markNodes({ brandNew: true })')), JSON.stringify(warnings))
    const marks = await own.markNodes({ brandNew: true })
    assert.ok(marks.every((m) => m.marked), JSON.stringify(marks))
    const lock = await own.acquire(name(), 5000, { retryCount: 0 }) // at once: this manager sees its own mark
    await lock.release()
    await own.quit()
  } finally {
    await Promise.all(clients.map((c) => c.quit()))
    fresh.stop()
  }
})

test('notified waiting: a release wakes a waiter long before its retry delay', async () => {
  // Polling alone would try again after 10 to 20 s; the release's notification wakes it at once.
  const patient = new Redlock(nodes.urls, { ...PATIENT, retryCount: -1, retryDelay: 15_000, retryJitter: 5000 })
  const resource = name()
  const held = await patient.acquire(resource, 30_000)
  const waiting = patient.acquire(resource, 10_000)
  await sleep(300)
  const released = Date.now()
  await held.release()
  const lock = await waiting
  assert.ok(Date.now() - released < 8000, `woken after ${Date.now() - released} ms`)
  await lock.release()
  await patient.quit()
})

test('fair waiting: waiters get the lock in arrival order', async () => {
  const fair = new Redlock(nodes.urls, { ...PATIENT, fair: true, retryCount: -1, retryDelay: 50 })
  const resource = name()
  const first = await fair.acquire(resource, 10_000)
  const order = []
  const waiters = []
  for (const who of ['w1', 'w2', 'w3']) {
    waiters.push(fair.acquire(resource, 10_000).then(async (lock) => {
      order.push(who)
      await lock.release()
    }))
    await sleep(300) // each queues before the next arrives
  }
  await first.release()
  await Promise.all(waiters)
  assert.deepEqual(order, ['w1', 'w2', 'w3'])
  await fair.quit()
})
