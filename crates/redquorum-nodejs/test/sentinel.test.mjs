// Over a Sentinel node (a `redis+sentinel://` URL, given as node-redlock users give servers: one
// comma-separated string): a primary with one replica behind three sentinels, started by the
// launcher. The core follows the primary the sentinels name and waits for the replica on every
// vote; nothing in the Node layer knows about Sentinel but how a list of servers is split.
import { after, before, test } from 'node:test'
import assert from 'node:assert/strict'
import Redis from 'ioredis'
import Redlock, { ResourceLockedError } from '../index.mjs'
import { Nodes, PATIENT, mostAtOnce, name } from './helpers.mjs'

let group
let redlock
before(() => {
  group = new Nodes(1, ['--sentinel'])
  redlock = new Redlock(group.servers, { ...PATIENT, retryDelay: 20, retryJitter: 10, retryCount: -1 })
})
after(async () => {
  await redlock?.quit()
  group?.stop()
})

test('a Sentinel URL in a server string: exclusion, and every vote on the replica', async () => {
  assert.match(group.servers, /^redis\+sentinel:\/\/[^,]+,[^,]+,[^,]+\/\w+$/)
  const resource = name()
  assert.equal(await mostAtOnce(redlock, resource), 1)

  const lock = await redlock.acquire([resource], 5000)
  const other = new Redlock(group.servers, { ...PATIENT, retryCount: 0 })
  try {
    await assert.rejects(other.acquire([resource], 5000), ResourceLockedError)
    const replica = new Redis(group.urls[1], { maxRetriesPerRequest: 1 })
    try {
      assert.equal(await replica.get(resource), lock.value)
    } finally {
      replica.disconnect()
    }
  } finally {
    await lock.release()
    await other.quit()
  }
})
