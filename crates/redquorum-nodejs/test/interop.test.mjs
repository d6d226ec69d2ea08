// Interoperability with node-redlock 4 and 5 (on ioredis) on the same servers, both ways: the
// wire format is the standard one, so each side respects the other's locks.
import { after, before, test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import NodeRedlock5 from 'redlock'
import Redlock, { ResourceLockedError } from '../index.mjs'
import { Nodes, PATIENT, name } from './helpers.mjs'

const NodeRedlock4 = createRequire(import.meta.url)('redlock4')

let nodes
let clients
let ours
before(() => {
  nodes = new Nodes(3)
  clients = nodes.clients()
  ours = new Redlock(nodes.urls, { ...PATIENT, retryCount: 0 })
})
after(async () => {
  await ours?.quit()
  await Promise.all((clients ?? []).map((c) => c.quit()))
  nodes?.stop()
})

test('node-redlock 5 and ours exclude each other, both ways', async () => {
  const theirs = new NodeRedlock5(clients, { retryCount: 0 })
  const resource = name()
  const their = await theirs.acquire([resource], 10_000)
  await assert.rejects(ours.acquire([resource], 10_000), ResourceLockedError)
  assert.equal((await ours.locked(resource)).value, their.value, 'ours reads their holder')
  await their.release()
  const lock = await ours.acquire([resource], 10_000)
  await assert.rejects(theirs.acquire([resource], 10_000), (e) => e.name === 'ExecutionError')
  await lock.release()
  const again = await theirs.acquire([resource], 10_000)
  await again.release()
})

test('node-redlock 4 and ours exclude each other, both ways', async () => {
  const theirs = new NodeRedlock4(clients, { retryCount: 0 })
  theirs.on('clientError', () => {})
  const resource = name()
  const their = await theirs.lock(resource, 10_000)
  await assert.rejects(ours.acquire([resource], 10_000), ResourceLockedError)
  await their.unlock()
  const lock = await ours.acquire([resource], 10_000)
  await assert.rejects(theirs.lock(resource, 10_000), (e) => e.name === 'LockError')
  await lock.release()
  const again = await theirs.lock(resource, 10_000)
  await again.unlock()
})
