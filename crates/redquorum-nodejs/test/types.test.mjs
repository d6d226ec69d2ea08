// The generated types, as TypeScript users of either module system see them, and the CommonJS
// entry point: the same classes as the ES module one.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import * as esm from 'redquorum'

const HERE = dirname(fileURLToPath(import.meta.url))

test('index.d.ts type-checks an ES module user and a CommonJS user', async () => {
  const tsc = join(HERE, '..', 'node_modules', 'typescript', 'bin', 'tsc')
  const out = await new Promise((resolve) => {
    execFile(process.execPath, [tsc, '-p', join(HERE, 'types', 'tsconfig.json')], (error, stdout) =>
      resolve(error ? stdout || error.message : ''))
  })
  assert.equal(out, '')
})

test('require() and import give the same classes, with node-redlock 4 and 5\'s forms', () => {
  const cjs = createRequire(import.meta.url)('redquorum')
  assert.equal(cjs, esm.default)
  assert.equal(cjs.default, esm.Redlock)
  assert.equal(cjs.ResourceLockedError, esm.ResourceLockedError)
  assert.ok(new cjs.ResourceLockedError('x') instanceof esm.ExecutionError)
  assert.throws(() => new cjs([]), esm.ConfigError)
})
