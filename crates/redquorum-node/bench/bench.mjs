// Compares redquorum with node-redlock 4.x and 5.0.0-beta.2 (and @sesamecare-oss/redlock when
// installed) on the same fresh local nodes, in one run:
//
// - uncontended: 32 concurrent tasks, each acquiring and releasing its own resource in a loop,
//   at N = 1, 3, 5 nodes: cycles per second;
// - contended: 8 tasks taking turns on one resource (N = 3): hand-offs per second, and the p99
//   of a task's wait for the lock.
//
// Build the addon optimised first (`npm run build`), then:
//   node bench/bench.mjs [--seconds 5]
// Nodes are started by the project's launcher ($REDLOCK_BIN, else target/debug/redlock) and
// stopped by pid when done. Figures go to stdout as a Markdown table.
import { createRequire } from 'node:module'
import Redis from 'ioredis'
import NodeRedlock5 from 'redlock'
import Redlock from '../index.mjs'
import { Nodes } from '../test/helpers.mjs'

const require = createRequire(import.meta.url)
const NodeRedlock4 = require('redlock4')
let Sesame = null
try { Sesame = require('@sesamecare-oss/redlock').Redlock } catch { /* optional */ }

const secondsArg = process.argv.indexOf('--seconds')
const SECONDS = secondsArg > 0 ? Number(process.argv[secondsArg + 1]) : 5
const TASKS = 32
const CONTENDERS = 8
const TTL = 10_000

/** The clients under test, each as `{ name, acquire(resource, contended) -> release() }`. */
function contestants (nodes) {
  const made = []
  const ours = new Redlock(nodes.urls, { retryCount: -1 })
  made.push({
    name: 'redquorum',
    acquire: async (r) => { const l = await ours.acquire([r], TTL); return () => l.release() },
    close: () => ours.quit()
  })
  const clients = nodes.urls.map((u) => new Redis(u))
  // node-redlock waits by polling only: retryDelay 200 ms (its default), retries unbounded.
  const v5 = new NodeRedlock5(clients, { retryCount: -1 })
  made.push({
    name: 'node-redlock 5.0.0-beta.2',
    acquire: async (r) => { const l = await v5.acquire([r], TTL); return () => l.release() },
    close: async () => {}
  })
  const v4 = new NodeRedlock4(clients, { retryCount: -1 })
  v4.on('clientError', () => {})
  made.push({
    name: 'node-redlock 4.2.0',
    acquire: async (r) => { const l = await v4.lock(r, TTL); return () => l.unlock() },
    close: async () => {}
  })
  if (Sesame) {
    const s = new Sesame(clients, { retryCount: -1 })
    made.push({
      name: '@sesamecare-oss/redlock',
      acquire: async (r) => { const l = await s.acquire([r], TTL); return () => l.release() },
      close: async () => {}
    })
  }
  made.close = async () => {
    for (const c of made) await c.close()
    await Promise.all(clients.map((c) => c.quit()))
  }
  return made
}

async function uncontended (client) {
  const until = Date.now() + SECONDS * 1000
  let cycles = 0
  await Promise.all(Array.from({ length: TASKS }, async (_, t) => {
    const resource = `bench:u:${client.name}:${t}:${Math.random()}`
    while (Date.now() < until) {
      const release = await client.acquire(resource)
      await release()
      cycles++
    }
  }))
  return cycles / SECONDS
}

async function contended (client) {
  const resource = `bench:c:${client.name}:${Math.random()}`
  const until = Date.now() + SECONDS * 1000
  let handoffs = 0
  const waits = []
  await Promise.all(Array.from({ length: CONTENDERS }, async () => {
    while (Date.now() < until) {
      const asked = performance.now()
      const release = await client.acquire(resource)
      waits.push(performance.now() - asked)
      handoffs++
      await release()
    }
  }))
  waits.sort((a, b) => a - b)
  const p99 = waits[Math.min(waits.length - 1, Math.floor(waits.length * 0.99))] ?? NaN
  return { rate: handoffs / SECONDS, p99 }
}

const rows = []
for (const n of [1, 3, 5]) {
  const nodes = new Nodes(n)
  try {
    const made = contestants(nodes)
    for (const client of made) {
      const rate = await uncontended(client)
      rows.push({ n, client: client.name, what: 'uncontended', rate })
      process.stderr.write(`N=${n} ${client.name}: ${rate.toFixed(0)} cycles/s\n`)
    }
    if (n === 3) {
      for (const client of made) {
        const { rate, p99 } = await contended(client)
        rows.push({ n, client: client.name, what: 'contended', rate, p99 })
        process.stderr.write(`N=${n} ${client.name}: ${rate.toFixed(0)} hand-offs/s, p99 wait ${p99.toFixed(0)} ms\n`)
      }
    }
    await made.close()
  } finally {
    nodes.stop()
  }
}

console.log(`| Client | N=1 cycles/s | N=3 cycles/s | N=5 cycles/s | hand-offs/s (N=3, ${CONTENDERS} tasks) | p99 wait |`)
console.log('|---|---:|---:|---:|---:|---:|')
for (const name of [...new Set(rows.map((r) => r.client))]) {
  const u = (n) => rows.find((r) => r.client === name && r.n === n && r.what === 'uncontended')?.rate.toFixed(0) ?? '—'
  const c = rows.find((r) => r.client === name && r.what === 'contended')
  console.log(`| ${name} | ${u(1)} | ${u(3)} | ${u(5)} | ${c ? c.rate.toFixed(0) : '—'} | ${c ? `${c.p99.toFixed(0)} ms` : '—'} |`)
}
