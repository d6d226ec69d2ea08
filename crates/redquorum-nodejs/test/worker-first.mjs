// A process of processes.test.mjs whose main thread never loads the package: workers load it,
// one after another, each after the previous one ended (a worker pool, a test runner's
// threads). argv: servers, resource, workers.
import { Worker } from 'node:worker_threads'
import { fileURLToPath } from 'node:url'

const CHILD = fileURLToPath(new URL('./child.mjs', import.meta.url))
const [, , servers, resource, workers] = process.argv

for (let i = 0; i < Number(workers); i++) {
  const worker = new Worker(CHILD, { workerData: { what: 'count', servers, resource, rounds: 2 } })
  await new Promise((resolve, reject) => {
    worker.once('error', reject)
    worker.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`worker ${i} exited ${code}`))))
  })
}
console.log('done')
