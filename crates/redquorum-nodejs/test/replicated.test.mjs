// Over a node behind a fixed address (a `redis+replicated://host:port?replicas=R` URL): here the
// primary's own address, with one replica the test attaches. The core waits for the replica on
// every vote; nothing in the Node layer knows about it.
import { after, before, test } from 'node:test'
import assert from 'node:assert/strict'
import Redlock, { ResourceLockedError } from '../index.mjs'
import { Nodes, PATIENT, mostAtOnce, name, sleep } from './helpers.mjs'

let pair
let url
before(async () => {
  pair = new Nodes(2)
  const [primary, replica] = [pair.client(0), pair.client(1)]
  try {
    const port = new URL(pair.urls[0]).port
    await replica.replicaof('127.0.0.1', port)
    for (let i = 0; !(await primary.info('replication')).includes('state=online'); i++) {
      assert.ok(i < 600, 'the replica never came online')
      await sleep(50)
    }
    url = `redis+replicated://127.0.0.1:${port}?replicas=1`
  } finally {
    primary.disconnect()
    replica.disconnect()
  }
})
after(() => pair?.stop())

test('a replicated URL: exclusion, and every vote on the replica', async () => {
  const redlock = new Redlock([url], { ...PATIENT, retryDelay: 20, retryJitter: 10, retryCount: -1 })
  const other = new Redlock([url], { ...PATIENT, retryCount: 0 })
  const resource = name()
  try {
    assert.equal(await mostAtOnce(redlock, resource), 1)
    const lock = await redlock.acquire([resource], 5000)
    try {
      await assert.rejects(other.acquire([resource], 5000), ResourceLockedError)
      const replica = pair.client(1)
      try {
        assert.equal(await replica.get(resource), lock.value)
      } finally {
        replica.disconnect()
      }
    } finally {
      await lock.release()
    }
  } finally {
    await redlock.quit()
    await other.quit()
  }
})

test('a replicated URL without the replicas it keeps is refused by name', () => {
  assert.throws(() => new Redlock(['redis+replicated://127.0.0.1:6379']), /replicas=R/)
})
