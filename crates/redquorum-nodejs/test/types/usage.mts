// Type-checked by types.test.mjs (tsc --noEmit): the generated index.d.ts as an ES module user
// sees it. Not run.
import Redlock, { ExecutionError, Lock, LockLostError, ResourceLockedError } from 'redquorum'

export async function usage (): Promise<bigint | null> {
  const redlock = new Redlock(['redis://127.0.0.1:6379'], { retryCount: 3, driftFactor: 0.01, fair: true })
  const lock: Lock = await redlock.acquire(['a', 'b'], 5000, { signal: AbortSignal.timeout(1000) })
  const fence: bigint = await lock.fence()
  const expiration: number = lock.expiration
  lock.lost.addEventListener('abort', () => console.log(lock.lost.reason))
  await lock.extend(10_000)
  await lock.release()
  const n: number = await redlock.using('c', 1000, async (signal) => {
    if (signal.aborted) throw signal.error
    return 42
  })
  try {
    await redlock.acquire('d', 1000, { permits: 2 })
  } catch (e) {
    if (e instanceof ResourceLockedError) console.log(e.replies[0].node, e.quorum)
    if (e instanceof ExecutionError && !(e instanceof LockLostError)) console.log(e.cause)
  }
  for await (const leader of redlock.observe('e')) console.log(leader?.identity, leader?.term)
  const holder = await redlock.locked('f')
  console.log(holder?.remaining, n, expiration)
  await redlock.quit()
  return fence
}
