import { availableParallelism } from 'node:os'
import { hash, verify } from '@node-rs/argon2'
import { describe, expect, it } from 'vitest'
import { PasswordHasher } from '../src/security/passwords.ts'

// argon2id holds its memory cost (19 MiB by default) and a thread of libuv's pool for each hash or
// verification in flight: the hasher runs as many at once as there are cores, and queues the rest
// in order, so a burst of logins neither multiplies the service's memory nor takes every pool
// thread from file and DNS work. The real argon2 functions run here, wrapped to count how many are
// in flight.

const CHEAP = { memoryKib: 1024, iterations: 1, parallelism: 1 }

function observed() {
  let inFlight = 0
  let most = 0
  /** The stored hashes argon2 really verified against (a parse failure does no work). */
  const verifiedAgainst: string[] = []
  const track = async <T>(work: () => Promise<T>): Promise<T> => {
    inFlight += 1
    most = Math.max(most, inFlight)
    try {
      return await work()
    } finally {
      inFlight -= 1
    }
  }
  return {
    argon2: {
      hash: ((...args: Parameters<typeof hash>) => track(() => hash(...args))) as typeof hash,
      verify: ((...args: Parameters<typeof verify>) =>
        track(async () => {
          const answer = await verify(...args)
          verifiedAgainst.push(String(args[0]))
          return answer
        })) as typeof verify,
    },
    most: () => most,
    verifiedAgainst,
  }
}

describe('password hashing: concurrency and equal work', () => {
  it('runs at most `concurrency` verifications at once and answers every one', async () => {
    const probe = observed()
    const hasher = await PasswordHasher.create(CHEAP, { concurrency: 2, argon2: probe.argon2 })
    const stored = await hasher.hash('the right passphrase')
    const attempts = Array.from({ length: 12 }, (_, i) =>
      i % 3 === 0 ? 'the right passphrase' : `wrong ${i}`,
    )
    const answers = await Promise.all(attempts.map((password) => hasher.verify(stored, password)))
    expect(answers).toEqual(attempts.map((password) => password === 'the right passphrase'))
    expect(probe.most()).toBe(2)
  })

  it('counts hashes and verifications against the same limit, and the unknown-account path too', async () => {
    const probe = observed()
    const hasher = await PasswordHasher.create(CHEAP, { concurrency: 3, argon2: probe.argon2 })
    const stored = await hasher.hash('a passphrase of some length')
    await Promise.all([
      ...Array.from({ length: 4 }, (_, i) => hasher.hash(`new passphrase ${i}`)),
      ...Array.from({ length: 4 }, () => hasher.verify(stored, 'a passphrase of some length')),
      ...Array.from({ length: 4 }, () => hasher.verifyNothing('whatever was typed')),
    ])
    expect(probe.most()).toBe(3)
  })

  it('defaults to the cores available to the process', async () => {
    const probe = observed()
    const hasher = await PasswordHasher.create(CHEAP, { argon2: probe.argon2 })
    const stored = await hasher.hash('the right passphrase')
    const cores = availableParallelism()
    await Promise.all(Array.from({ length: cores * 3 }, () => hasher.verify(stored, 'the right passphrase')))
    expect(probe.most()).toBe(cores)
  })

  it('spends a real verification on an unusable or malformed hash, as on a wrong password', async () => {
    // Answering a hash no password matches faster than a wrong password would tell such an account
    // apart, should an active account ever hold one (invitees hold one while inactive).
    const probe = observed()
    const hasher = await PasswordHasher.create(CHEAP, { argon2: probe.argon2 })
    const stored = await hasher.hash('the right passphrase')
    probe.verifiedAgainst.length = 0
    expect(await hasher.verify(PasswordHasher.unusableHash(), 'the right passphrase')).toBe(false)
    expect(await hasher.verify('$argon2id$not-a-hash', 'the right passphrase')).toBe(false)
    expect(await hasher.verify(stored, 'a wrong passphrase')).toBe(false)
    expect(probe.verifiedAgainst).toHaveLength(3)
    for (const against of probe.verifiedAgainst)
      expect(against).toMatch(/^\$argon2id\$v=19\$m=1024,t=1,p=1\$/)
  })
})
