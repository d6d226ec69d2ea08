// Process life: exclusion across processes and worker threads, and exits: a process that holds
// nothing (or forgot a lock) exits on its own; one that exits with locks held exits cleanly.
import { after, before, test } from 'node:test'
import assert from 'node:assert/strict'
import { fork, spawn } from 'node:child_process'
import { Worker } from 'node:worker_threads'
import { fileURLToPath } from 'node:url'
import Redlock from '../index.mjs'
import { Nodes, PATIENT, name } from './helpers.mjs'

const CHILD = fileURLToPath(new URL('./child.mjs', import.meta.url))
const NATIVE = fileURLToPath(new URL('../native.js', import.meta.url))
const WORKER_FIRST = fileURLToPath(new URL('./worker-first.mjs', import.meta.url))

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

/**
 * Runs `node ARGV`; resolves with its exit code, signal and output; kills it after `limit` ms.
 * @param {import('node:child_process').ChildProcess} [started] the process, when already started
 */
function node (argv, limit = 60_000, started = undefined) {
  return new Promise((resolve) => {
    const child = started ?? spawn(process.execPath, argv, { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    child.stdout.on('data', (d) => { out += d })
    child.stderr.on('data', (d) => { err += d })
    const timer = setTimeout(() => child.kill('SIGKILL'), limit)
    child.on('exit', (code, signal) => {
      clearTimeout(timer)
      resolve({ code, signal, out, err })
    })
  })
}

/**
 * Runs child.mjs, started by `child_process.fork` (as `cluster` does) or `spawn`; resolves with
 * its exit code, signal and output; kills it after `limit` ms.
 */
function run (args, limit = 60_000, how = 'spawn') {
  return how === 'fork'
    ? node([], limit, fork(CHILD, args, { silent: true }))
    : node([CHILD, ...args], limit)
}

/** A worker's first message, or its error. */
function firstMessage (worker) {
  return new Promise((resolve, reject) => {
    worker.once('message', resolve)
    worker.once('error', reject)
  })
}

test('4 processes (2 forked, 2 spawned): an exact counter', async () => {
  const resource = name()
  const rounds = 15
  const results = await Promise.all(['fork', 'fork', 'spawn', 'spawn'].map((how) =>
    run(['count', nodes.servers, resource, String(rounds)], 60_000, how)))
  for (const r of results) assert.deepEqual([r.code, r.signal], [0, null], r.err)
  const redis = nodes.client()
  try {
    assert.equal(Number(await redis.get(`${resource}:counter`)), 4 * rounds)
  } finally {
    redis.disconnect()
  }
})

test('worker_threads each get a working manager: an exact counter across 3 workers', async () => {
  const resource = name()
  const rounds = 10
  await Promise.all([0, 1, 2].map(() => new Promise((resolve, reject) => {
    const worker = new Worker(CHILD, { workerData: { what: 'count', servers: nodes.servers, resource, rounds } })
    worker.on('error', reject)
    worker.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`worker exited ${code}`))))
  })))
  const redis = nodes.client()
  try {
    assert.equal(Number(await redis.get(`${resource}:counter`)), 3 * rounds)
  } finally {
    redis.disconnect()
  }
})

test('workers that load the package one after another, the main thread never: the process lives', async () => {
  // The first thread to load the addon is the one its allocator counts as the process's main
  // thread; here that is a worker, which ends before the next one loads the addon.
  const resource = name()
  const workers = 4
  const r = await node([WORKER_FIRST, nodes.servers, resource, String(workers)])
  assert.deepEqual([r.code, r.signal], [0, null], `exit ${r.code} ${r.signal} ${r.err}`)
  const redis = nodes.client()
  try {
    assert.equal(Number(await redis.get(`${resource}:counter`)), 2 * workers)
  } finally {
    redis.disconnect()
  }
})

test('the addon loaded twice on one thread, both used at once: the process exits on its own', async () => {
  // Two environments on one thread (the require cache cleared between the loads), each with a
  // promise pending at the same time: each environment's count of them is its own.
  const script = `
    const native = require.resolve(${JSON.stringify(NATIVE)})
    const first = require(native)
    for (const key of Object.keys(require.cache)) delete require.cache[key]
    const second = require(native)
    const managers = [first, second].map((n) => new n.Manager(${JSON.stringify(nodes.urls)}, { nodeTimeout: 1000 }))
    Promise.all(managers.map((m) => m.locked('twice'))).then(() => console.log('settled'))
  `
  const r = await node(['-e', script], 10_000)
  assert.equal(r.out.trim(), 'settled', r.err)
  assert.deepEqual([r.code, r.signal], [0, null], 'held open after every promise settled')
})

test('a process that forgot a lock exits on its own; the lock stays until its TTL', async () => {
  const resource = name()
  const r = await run(['forget', nodes.servers, resource], 30_000)
  assert.deepEqual([r.code, r.signal], [0, null], `exit ${r.code} ${r.signal} ${r.err}`)
  const holder = await redlock.locked(resource)
  assert.equal(holder?.value, r.out.trim(), 'left to expire, not released at exit')
})

test('a process that exits with locks held (one kept alive) exits cleanly, 10 times', async () => {
  for (let i = 0; i < 10; i++) {
    const resource = name()
    const r = await run(['hold-and-exit', nodes.servers, resource], 30_000)
    assert.deepEqual([r.code, r.signal], [0, null], `run ${i}: exit ${r.code} ${r.signal} ${r.err}`)
    assert.ok((await redlock.locked(resource)) !== null, 'left to expire')
  }
})

test('a worker terminated while it holds locks: the process goes on, its locks are left to expire', async () => {
  const resource = name()
  const worker = new Worker(CHILD, { workerData: { what: 'hold-in-worker', servers: nodes.servers, resource } })
  const value = await firstMessage(worker)
  await worker.terminate()
  assert.equal((await redlock.locked(resource))?.value, value, 'left to expire')
  // The kept-alive one is no longer extended: gone within its 1 s TTL (and some slack).
  await new Promise((resolve) => setTimeout(resolve, 3000))
  assert.equal(await redlock.locked(`${resource}:kept`), null, 'still extended after the worker ended')
  // This thread's manager still works.
  const lock = await redlock.acquire([name()], 5000)
  await lock.release()
})

test('workers terminated with answers on their way: the process goes on, its own promises all settle', async () => {
  // Each terminated worker had operations in flight, whose answers arrive after its end; this
  // thread's own operations run throughout and must each settle once.
  let settled = 0
  let stop = false
  const mine = Array.from({ length: 8 }, async (_, t) => {
    const resource = name()
    while (!stop) {
      const lock = await redlock.acquire([`${resource}:${t}`], 10_000)
      await lock.release()
      settled++
    }
  })
  for (let i = 0; i < 5; i++) {
    const worker = new Worker(CHILD, { workerData: { what: 'busy-in-worker', servers: nodes.servers, resource: name() } })
    await firstMessage(worker)
    await worker.terminate()
  }
  const before = settled
  await new Promise((resolve) => setTimeout(resolve, 200))
  stop = true
  await Promise.all(mine)
  assert.ok(settled > before, `this thread's locks went on after the workers ended (${before} then ${settled})`)
})

test('a burst of operations from one tick: every promise settles, each lock\'s in the order asked', async () => {
  const locks = await Promise.all(Array.from({ length: 200 }, () => redlock.acquire([name()], 10_000)))
  // Extend, then release, asked together without awaiting: the extension runs first.
  const answers = await Promise.allSettled(locks.flatMap((lock) => [lock.extend(20_000), lock.release()]))
  const failed = answers.filter((a) => a.status === 'rejected')
  assert.deepEqual(failed.map((a) => String(a.reason)), [], 'every extension came before its release')
  for (const lock of locks) assert.equal(await redlock.locked(lock.resources[0]), null)
})

test('a worker terminated while it waits for a busy lock stops trying, and never takes it', async () => {
  const resource = name()
  const lock = await redlock.acquire([resource], 30_000)
  const worker = new Worker(CHILD, { workerData: { what: 'wait-in-worker', servers: nodes.servers, resource } })
  await firstMessage(worker)
  await new Promise((resolve) => setTimeout(resolve, 300)) // its attempts under way
  await worker.terminate()
  await new Promise((resolve) => setTimeout(resolve, 200)) // an attempt already sent lands
  // Every command the node sees from now on: none may be an attempt on the resource.
  const watcher = nodes.client(0)
  const attempts = []
  const monitor = await watcher.monitor()
  monitor.on('monitor', (_time, args) => {
    if (String(args[0]).toLowerCase() === 'set' && args[1] === resource) attempts.push(args)
  })
  try {
    await new Promise((resolve) => setTimeout(resolve, 1000)) // 20 retry delays while it is held
    await lock.release() // and once it is free
    await new Promise((resolve) => setTimeout(resolve, 500))
  } finally {
    monitor.disconnect()
    watcher.disconnect()
  }
  assert.deepEqual(attempts, [], 'the terminated worker\'s acquisition still tried')
  assert.equal(await redlock.locked(resource), null)
})
