// A child process of processes.test.mjs: what it does is argv[2].
import { parentPort, workerData, isMainThread } from 'node:worker_threads'
import Redis from 'ioredis'
import Redlock from '../index.mjs'

const [, , what, servers, resource, rounds] = process.argv
const options = isMainThread ? { what, servers, resource, rounds } : workerData

async function count () {
  // Increments a counter in Redis with a plain GET then SET: only the lock keeps it exact.
  const redlock = new Redlock(options.servers.split(','), { nodeTimeout: 1000, retryCount: -1, retryDelay: 20 })
  const redis = new Redis(options.servers.split(',')[0])
  for (let i = 0; i < Number(options.rounds); i++) {
    const lock = await redlock.acquire([options.resource], 10_000)
    const seen = Number(await redis.get(`${options.resource}:counter`) ?? 0)
    await new Promise((resolve) => setImmediate(resolve))
    await redis.set(`${options.resource}:counter`, String(seen + 1))
    await lock.release()
  }
  redis.disconnect()
  await redlock.quit()
}

switch (options.what) {
  case 'count':
    await count()
    parentPort?.postMessage('done')
    break
  case 'hold-and-exit': {
    // Exits with a lock held (and kept alive), mid-extension: exits cleanly, the keys expire.
    const redlock = new Redlock(options.servers.split(','), { nodeTimeout: 1000 })
    await redlock.acquire([options.resource], 30_000)
    redlock.using([`${options.resource}:kept`], 1000, async () => new Promise(() => {}))
    setTimeout(() => process.exit(0), 700)
    break
  }
  case 'hold-in-worker': {
    // A worker that holds a lock (one kept alive) until it is terminated.
    const redlock = new Redlock(options.servers.split(','), { nodeTimeout: 1000 })
    const lock = await redlock.acquire([options.resource], 30_000)
    redlock.using([`${options.resource}:kept`], 1000, async () => new Promise(() => {}))
    parentPort.postMessage(lock.value)
    break
  }
  case 'busy-in-worker': {
    // A worker whose 16 tasks lock and release without pause, until it is terminated: answers
    // are always on their way to it when it ends.
    const redlock = new Redlock(options.servers.split(','), { nodeTimeout: 1000 })
    let cycles = 0
    for (let t = 0; t < 16; t++) {
      (async () => {
        for (;;) {
          const lock = await redlock.acquire([`${options.resource}:${t}`], 10_000)
          await lock.release()
          if (++cycles === 200) parentPort.postMessage('running')
        }
      })()
    }
    break
  }
  case 'wait-in-worker': {
    // A worker that waits for a lock held elsewhere, retrying often, until it is terminated.
    const redlock = new Redlock(options.servers.split(','), { nodeTimeout: 1000, retryCount: -1, retryDelay: 50 })
    const waiting = redlock.acquire([options.resource], 10_000)
    parentPort.postMessage('waiting')
    await waiting
    break
  }
  case 'forget': {
    // Takes a lock and forgets it: nothing keeps the event loop alive, so the process ends.
    const redlock = new Redlock(options.servers.split(','), { nodeTimeout: 1000 })
    const lock = await redlock.acquire([options.resource], 30_000)
    console.log(lock.value)
    break
  }
}
