// One client, one node, 32 tasks locking and releasing a resource each: cycles per second, and
// where this process's CPU goes, thread by thread (the event loop's, the core's runtime thread),
// with each thread's sleeps per cycle (voluntary context switches). For looking at the crossing
// between the event loop and the core; bench.mjs is the comparison.
//
//   node bench/threads.mjs CLIENT URL [SECONDS]
//
// CLIENT: `defaults` (ours, quarantine off: a fresh server), `plain` (ours, fencing off too) or
// `node-redlock` (5). URL: a running redis-server, e.g. one started with
// `redis-server --port 7801 --save '' --appendonly no`. Linux only (/proc).
import { readdirSync, readFileSync } from 'node:fs'
import Redis from 'ioredis'
import NodeRedlock5 from 'redlock'
import Redlock from '../index.mjs'

const [client, url, seconds = '4'] = process.argv.slice(2)
if (!['defaults', 'plain', 'node-redlock'].includes(client) || !url) {
  console.error('usage: node bench/threads.mjs defaults|plain|node-redlock redis://HOST:PORT [SECONDS]')
  process.exit(64)
}

let acquire, close
if (client === 'node-redlock') {
  const redis = new Redis(url)
  const redlock = new NodeRedlock5([redis], { retryCount: -1 })
  acquire = async (r) => { const l = await redlock.acquire([r], 10_000); return () => l.release() }
  close = () => redis.quit()
} else {
  const settings = client === 'plain' ? { fencing: false, quarantine: false } : { quarantine: false }
  const redlock = new Redlock([url], { retryCount: -1, ...settings })
  acquire = async (r) => { const l = await redlock.acquire([r], 10_000); return () => l.release() }
  close = () => redlock.quit()
}

/** CPU ticks (1/100 s) and voluntary context switches of each thread of this process. */
function threads () {
  const seen = {}
  for (const tid of readdirSync('/proc/self/task')) {
    try {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8')
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'))
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      const status = readFileSync(`/proc/self/task/${tid}/status`, 'utf8')
      const sleeps = Number(/voluntary_ctxt_switches:\s+(\d+)/.exec(status)?.[1] ?? 0)
      seen[tid] = { name, ticks: Number(fields[11]) + Number(fields[12]), sleeps }
    } catch { /* a thread that ended meanwhile */ }
  }
  return seen
}

async function run (s) {
  const until = Date.now() + s * 1000
  const cpu = process.cpuUsage()
  let cycles = 0
  await Promise.all(Array.from({ length: 32 }, async (_, t) => {
    const resource = `threads:${client}:${t}:${Math.random()}`
    while (Date.now() < until) {
      const release = await acquire(resource)
      await release()
      cycles++
    }
  }))
  const used = process.cpuUsage(cpu)
  return { cycles, cpu: (used.user + used.system) / cycles }
}

await run(1) // warm-up
const before = threads()
const { cycles, cpu } = await run(Number(seconds))
const after = threads()
const byName = {}
for (const [tid, now] of Object.entries(after)) {
  const then = before[tid] ?? { ticks: 0, sleeps: 0 }
  const named = (byName[now.name] ??= { us: 0, sleeps: 0 })
  named.us += (now.ticks - then.ticks) * 10_000 / cycles
  named.sleeps += (now.sleeps - then.sleeps) / cycles
}
console.log(`${client}: ${(cycles / Number(seconds)).toFixed(0)} cycles/s, ${cpu.toFixed(1)} µs of CPU a cycle`)
for (const [name, { us, sleeps }] of Object.entries(byName)) {
  if (us > 0.05 || sleeps > 0.01) console.log(`  thread ${name}: ${us.toFixed(1)} µs a cycle, ${sleeps.toFixed(2)} sleeps a cycle`)
}
await close()
