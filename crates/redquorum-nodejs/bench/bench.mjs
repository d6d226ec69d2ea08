// Compares redquorum with node-redlock 4.x and 5.0.0-beta.2 (and @sesamecare-oss/redlock when
// installed) on the same fresh local nodes, in one run:
//
// - uncontended: 32 concurrent tasks, each acquiring and releasing its own resource in a loop,
//   at N = 1, 3, 5 nodes: cycles per second;
// - contended: 8 tasks taking turns on one resource, at N = 1, 3, 5: hand-offs per second
//   (acquisitions whose previous holder was another task), and the p99 of a task's wait for
//   the lock (from the call to the lock in hand), and the longest wait (a starved task).
//
// Build the addon optimised first (`npm run build`), then:
//   node bench/bench.mjs [--seconds 5] [--nodes 1,3,5] [--only NAME]
// `--only` keeps the clients whose name contains NAME. The uncontended rows also give this
// process's CPU time per cycle (every thread: the event loop, and the core's runtime for ours).
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

/** The value after `--name` on the command line, else `otherwise`. */
function option (name, otherwise) {
  const at = process.argv.indexOf(name)
  return at > 0 ? process.argv[at + 1] : otherwise
}
const SECONDS = Number(option('--seconds', '5'))
const NODES = option('--nodes', '1,3,5').split(',').map(Number)
/** Only the clients whose name contains this (all by default). */
const ONLY = option('--only', '')
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
  // node-redlock has no fencing tokens; ours without them sends the same commands.
  const plain = new Redlock(nodes.urls, { retryCount: -1, fencing: false })
  made.push({
    name: 'redquorum, fencing off',
    acquire: async (r) => { const l = await plain.acquire([r], TTL); return () => l.release() },
    close: () => plain.quit()
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

/** Cycles per second, and this process's CPU time per cycle in µs (every thread: the event
 * loop, and for ours the core's runtime). */
async function uncontended (client) {
  const until = Date.now() + SECONDS * 1000
  const cpu = process.cpuUsage()
  let cycles = 0
  await Promise.all(Array.from({ length: TASKS }, async (_, t) => {
    const resource = `bench:u:${client.name}:${t}:${Math.random()}`
    while (Date.now() < until) {
      const release = await client.acquire(resource)
      await release()
      cycles++
    }
  }))
  const used = process.cpuUsage(cpu)
  return { rate: cycles / SECONDS, cpu: (used.user + used.system) / cycles }
}

async function contended (client) {
  const resource = `bench:c:${client.name}:${Math.random()}`
  const until = Date.now() + SECONDS * 1000
  let handoffs = 0
  let last = -1
  const waits = []
  await Promise.all(Array.from({ length: CONTENDERS }, async (_, task) => {
    while (Date.now() < until) {
      const asked = performance.now()
      const release = await client.acquire(resource)
      // Every wait counts, those that ended after the window too (no survivor bias).
      waits.push(performance.now() - asked)
      if (last !== task && last !== -1 && Date.now() < until) handoffs++
      last = task
      await release()
    }
  }))
  waits.sort((a, b) => a - b)
  const p99 = waits[Math.min(waits.length - 1, Math.floor(waits.length * 0.99))] ?? NaN
  return { rate: handoffs / SECONDS, p99, longest: waits.at(-1) ?? NaN }
}

const rows = []
for (const n of NODES) {
  const nodes = new Nodes(n)
  try {
    const made = contestants(nodes)
    const chosen = made.filter((c) => c.name.includes(ONLY))
    for (const client of chosen) {
      const { rate, cpu } = await uncontended(client)
      rows.push({ n, client: client.name, what: 'uncontended', rate, cpu })
      process.stderr.write(`N=${n} ${client.name}: ${rate.toFixed(0)} cycles/s, ${cpu.toFixed(1)} µs CPU a cycle\n`)
    }
    {
      for (const client of chosen) {
        const { rate, p99, longest } = await contended(client)
        rows.push({ n, client: client.name, what: 'contended', rate, p99, longest })
        process.stderr.write(`N=${n} ${client.name}: ${rate.toFixed(0)} hand-offs/s, p99 wait ${p99.toFixed(0)} ms, longest ${longest.toFixed(0)} ms\n`)
      }
    }
    await made.close()
  } finally {
    nodes.stop()
  }
}

console.log('| Client | N | uncontended cycles/s (32 tasks) | its CPU µs/cycle | contended hand-offs/s (8 tasks) | contended p99 wait | longest wait |')
console.log('|---|---:|---:|---:|---:|---:|---:|')
for (const name of [...new Set(rows.map((r) => r.client))]) {
  for (const n of NODES) {
    const u = rows.find((r) => r.client === name && r.n === n && r.what === 'uncontended')
    const c = rows.find((r) => r.client === name && r.n === n && r.what === 'contended')
    console.log(`| ${name} | ${n} | ${u?.rate.toFixed(0) ?? '—'} | ${u?.cpu.toFixed(1) ?? '—'} | ${c?.rate.toFixed(0) ?? '—'} | ${c ? `${c.p99.toFixed(1)} ms` : '—'} | ${c ? `${c.longest.toFixed(0)} ms` : '—'} |`)
  }
}
