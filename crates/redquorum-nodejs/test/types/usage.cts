// Type-checked by types.test.mjs (tsc --noEmit): the generated index.d.ts as a CommonJS user
// sees it, with node-redlock 4's `require` form and node-redlock 5's `.default`. Not run.
import Redlock = require('redquorum')

export async function usage (): Promise<void> {
  const A = Redlock
  const B = Redlock.default
  const redlock = new A('redis://127.0.0.1:6379')
  const other = new B(['redis://127.0.0.1:6379'])
  const lock: Redlock.Lock = await redlock.acquire(['a'], 1000)
  await other.release(lock)
  const error: Redlock.ExecutionError = new Redlock.ResourceLockedError('busy')
  console.log(error.message)
}
