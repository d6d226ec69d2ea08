// The README's first example, run as written (only REDLOCK_SERVERS is set, as the launcher's
// `eval "$(redlock nodes start)"` would).
import { after, before, test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from 'node:fs'
import { join, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Nodes } from './helpers.mjs'

const PACKAGE = join(dirname(fileURLToPath(import.meta.url)), '..')

let nodes
before(() => { nodes = new Nodes(3) })
after(() => nodes?.stop())

test('the README\'s example runs as written', async () => {
  const readme = readFileSync(join(PACKAGE, 'README.md'), 'utf8')
  const example = readme.match(/```js\n([\s\S]*?)```/)[1]
  // Inside the package, where `import 'redquorum'` is the package itself (a self-reference
  // through package.json's "exports"): the example runs exactly as written.
  const dir = mkdtempSync(join(PACKAGE, 'test', '.readme-'))
  try {
    const file = join(dir, 'example.mjs')
    writeFileSync(file, example)
    const out = await new Promise((resolve, reject) => {
      execFile(process.execPath, [file], { env: { ...process.env, REDLOCK_SERVERS: nodes.servers }, timeout: 60_000 },
        (error, stdout, stderr) => (error ? reject(new Error(`${error.message}\n${stderr}`)) : resolve(stdout)))
    })
    assert.match(out, /^total 42$/m)
    assert.match(out, /^fence \d+n$/m)
    assert.match(out, /^busy: true$/m)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})
