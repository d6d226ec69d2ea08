// Real redis-server processes for the suite, started by the project's node launcher
// (`redlock nodes start`, crate redquorum-cli), so no server-starting code is copied here; they
// are stopped by `redlock nodes stop`, which stops exactly the pids it started. The launcher
// gives each brand-new server a marker that vouches for it, so the nodes vote at once.
//
// The `redlock` binary is $REDLOCK_BIN, else target/debug/redlock of this checkout (built by
// scripts/test-node.sh), else the one on PATH.
import { execFileSync } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { randomBytes } from 'node:crypto'
import Redis from 'ioredis'

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')

// The node timeout of managers whose tests measure nothing about timeouts: the default, 100 ms,
// bounds a vote in production, but on a loaded 2-core machine running a debug build a healthy
// local node has answered later than that (the Python suite's PATIENT_NODE_TIMEOUT, same reason).
export const PATIENT = { nodeTimeout: 1000 }

function redlockBin () {
  if (process.env.REDLOCK_BIN) return process.env.REDLOCK_BIN
  const local = join(ROOT, 'target', 'debug', 'redlock')
  return existsSync(local) ? local : 'redlock'
}

/** N nodes started by the launcher in a directory of their own. */
export class Nodes {
  /**
   * @param {number} count
   * @param {string[]} extra more `nodes start` arguments (`--sentinel`: each node a primary
   *   with a replica behind three sentinels)
   */
  constructor (count = 3, extra = []) {
    // In memory where the machine has it: the nodes fsync every write.
    const base = existsSync('/dev/shm') ? '/dev/shm' : tmpdir()
    this.dir = mkdtempSync(join(base, 'redquorum-nodejs-'))
    const out = execFileSync(redlockBin(),
      ['nodes', 'start', '--count', String(count), '--dir', this.dir, '--json', ...extra],
      { encoding: 'utf8', timeout: 120_000 })
    const started = JSON.parse(out)
    /** @type {string[]} */
    this.urls = started.nodes.map((n) => n.url)
    /** @type {number[]} */
    this.pids = started.nodes.map((n) => n.pid)
    this.servers = started.servers
  }

  /** An ioredis client of node `i` (the caller quits it). */
  client (i = 0) {
    return new Redis(this.urls[i], { maxRetriesPerRequest: 1 })
  }

  /** One ioredis client per node (the caller quits them). */
  clients () {
    return this.urls.map((url) => new Redis(url, { lazyConnect: false, maxRetriesPerRequest: 1 }))
  }

  stop () {
    try {
      execFileSync(redlockBin(), ['nodes', 'stop', '--dir', this.dir], { timeout: 60_000, stdio: 'ignore' })
    } finally {
      rmSync(this.dir, { recursive: true, force: true })
    }
  }
}

/** A resource name of its own for each test. */
export function name (prefix = 'test') {
  return `${prefix}:${randomBytes(6).toString('hex')}`
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * Four tasks take `resource` through `redlock` five times each: how many held it at once, at
 * most (1 when the lock excludes).
 */
export async function mostAtOnce (redlock, resource) {
  let inside = 0
  let most = 0
  await Promise.all(Array.from({ length: 4 }, async () => {
    for (let i = 0; i < 5; i++) {
      const lock = await redlock.acquire([resource], 5000)
      inside += 1
      most = Math.max(most, inside)
      await sleep(1)
      inside -= 1
      await lock.release()
    }
  }))
  return most
}

