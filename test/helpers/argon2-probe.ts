// Preloaded into a service process (`node --import`, see service-process.ts): counts argon2
// verifications, the expensive step of a login, so a test can tell how many passwords were really
// checked. @node-rs/argon2 is CommonJS: its exports are wrapped here before the application's ESM
// import reads them. The count is answered over the IPC channel: send 'argon2-verifications'.
import { createRequire } from 'node:module'
import path from 'node:path'

const require = createRequire(path.resolve(import.meta.dirname, '../../src/security/passwords.ts'))
const argon2 = require('@node-rs/argon2') as { verify: (...args: unknown[]) => Promise<boolean> }
const verify = argon2.verify
let verifications = 0
argon2.verify = (...args: unknown[]) => {
  verifications += 1
  return verify(...args)
}

process.on('message', (message) => {
  if (message === 'argon2-verifications') process.send?.({ verifications })
})
