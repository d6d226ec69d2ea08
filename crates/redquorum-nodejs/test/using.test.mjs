// using(): the lock is kept alive past its TTL, and the routine's signal aborts on any loss
// (keys deleted, nodes frozen), with signal.error set.
import { after, before, test } from 'node:test'
import assert from 'node:assert/strict'
import Redlock, { LockLostError } from '../index.mjs'
import { Nodes, PATIENT, name, sleep } from './helpers.mjs'

let nodes
let redlock
before(() => {
  nodes = new Nodes(3)
  redlock = new Redlock(nodes.urls, PATIENT)
})
after(async () => {
  await redlock?.quit()
  nodes?.stop()
})

/** Resolves with the signal's error when it aborts; rejects after `limit` ms. */
function aborted (signal, limit) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the signal did not abort within ${limit} ms`)), limit)
    signal.addEventListener('abort', () => { clearTimeout(timer); resolve(signal.error) }, { once: true })
  })
}

test('using() outlives the TTL: still held by a quorum after 3 TTLs, released after', async () => {
  const resource = name()
  let value
  const result = await redlock.using([resource], 1000, async (signal) => {
    await sleep(3000)
    const holder = await redlock.locked(resource)
    value = holder?.value
    assert.equal(signal.aborted, false, String(signal.error))
    return 'done'
  })
  assert.equal(result, 'done')
  assert.ok(value, 'held after three TTLs')
  assert.equal(await redlock.locked(resource), null, 'released after the routine')
})

test('using() aborts the signal when the keys are deleted, and throws the loss', async () => {
  const resource = name()
  const clients = nodes.clients()
  try {
    const run = redlock.using([resource], 1500, async (signal) => {
      await Promise.all(clients.map((c) => c.del(resource)))
      const error = await aborted(signal, 10_000)
      assert.ok(error instanceof LockLostError, String(error))
      assert.equal(signal.reason, error)
      assert.equal(error.cause, 'not_held')
      return 'stopped'
    })
    await assert.rejects(run, LockLostError)
  } finally {
    await Promise.all(clients.map((c) => c.quit()))
  }
})

test('using() aborts the signal when a majority of nodes freezes', async () => {
  const resource = name()
  const frozen = nodes.pids.slice(0, 2)
  try {
    const run = redlock.using([resource], 1500, async (signal) => {
      for (const pid of frozen) process.kill(pid, 'SIGSTOP')
      const error = await aborted(signal, 10_000)
      assert.ok(error instanceof LockLostError, String(error))
      for (const pid of frozen) process.kill(pid, 'SIGCONT')
    })
    await assert.rejects(run, LockLostError)
  } finally {
    for (const pid of frozen) process.kill(pid, 'SIGCONT')
  }
})

test('using() releases when the routine throws, and rethrows its error', async () => {
  const resource = name()
  const oops = new Error('oops')
  await assert.rejects(redlock.using(resource, 5000, {}, async () => { throw oops }), (e) => e === oops)
  assert.equal(await redlock.locked(resource), null)
})

test('automaticExtensionThreshold: a larger threshold extends sooner, never later', async () => {
  const resource = name()
  await redlock.using([resource], 3000, { automaticExtensionThreshold: 2700 }, async (signal) => {
    // The library's default extends every third of the validity (~990 ms): at 700 ms, about
    // 2.3 s would be left. With the threshold, it extends every ~270 ms: more than 2.5 s left.
    await sleep(700)
    assert.equal(signal.aborted, false)
    const holder = await redlock.locked(resource)
    assert.ok(holder.remaining > 2500, `remaining ${holder.remaining}`)
  })
})
