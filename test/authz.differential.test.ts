import { randomInt } from 'node:crypto'
import { FgaApiValidationError, type OpenFgaClient, type WriteAuthorizationModelRequest } from '@openfga/sdk'
import pLimit from 'p-limit'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EmbeddedAuthorization, ResolutionDepthExceededError } from '../src/authz/embedded.ts'
import { ModelIndex, parseModel } from '../src/authz/model.ts'
import { createOpenFgaAgents, createOpenFgaClient, type OpenFgaAgents } from '../src/authz/openfga.ts'
import { AuthorizationRequestError, type CheckRequest, type TupleKey } from '../src/authz/port.ts'
import type { ContractPort, MakeContractPort } from './authz.contract.ts'
import { createTestDatabase, type TestDatabase } from './helpers/database.ts'
import { type GeneralAnswer, generalResolutionAnswers } from './helpers/fga-general-resolution.ts'
import {
  checkUniverse,
  generateModel,
  generateTuples,
  modelDsl,
  probeTuples,
  Random,
} from './helpers/fga-generator.ts'
import { type OpenFgaServer, openFgaAvailable, startOpenFga } from './helpers/openfga-server.ts'

// Differential testing of the embedded evaluator against a real OpenFGA server, the reference:
// random models in the part of the modelling language the embedded evaluator supports, random tuples
// each model admits, and every check over a bounded universe of users, relations and objects, asked
// of both; and random writes, valid or not, which both must accept or refuse alike. Any difference
// fails the test, printed with the model, the tuples, the check and the fewest tuples that still
// show it. Models OpenFGA refuses (a relation without an entrypoint, say) are counted apart.
//
// OpenFGA answers some checks in two ways. Where a relation recurses on itself (`[group#member]` in
// group#member, `viewer from parent` in viewer), it may take a fast path that its general resolution
// does not: their answers differ where a cycle of tuples meets an exclusion (the general resolution
// carries "cycle detected" up through the subtraction, the fast path does not), and where the fast
// path is wrong (v1.10.2: a user granted both directly and through a wildcard on an object of the
// recursion is denied; a userset of another relation of the recursive type is taken for one of the
// recursion). So each model is also written with one more, unrelated type that keeps OpenFGA from
// building the weighted graph its fast paths need: every check then goes through the general
// resolution. The embedded evaluator must give one of OpenFGA's two answers; checks where it gives
// the general resolution's and the fast path answers otherwise are counted and printed.
// And OpenFGA evaluates a rewrite's branches concurrently: where an intersection or exclusion meets
// a cycle on one side and a plain false (or a userset containing itself) on the other, its answer
// depends on which comes back first. For a check answered differently from both, every answer the
// general resolution can give, in any order, is worked out in memory (fga-general-resolution.ts);
// when both OpenFGA's answer and the embedded evaluator's are among them, the check is counted apart.
//
// FGA_DIFF_SEED=<n> replays a run (its seed is printed); FGA_DIFF_CASES=<n> sets how many models are
// compared (default 25).

const SEED = process.env.FGA_DIFF_SEED ? Number(process.env.FGA_DIFF_SEED) : randomInt(2 ** 31)
const CASES = process.env.FGA_DIFF_CASES ? Number(process.env.FGA_DIFF_CASES) : 25
/** Candidate models generated at most, per model compared: the rest are the ones OpenFGA refuses. */
const ATTEMPTS_PER_CASE = 4
const TUPLES = { min: 8, max: 30 }
/** Writes per model, valid or not, compared one by one. */
const PROBES = 8

/**
 * A type that makes OpenFGA's weighted graph of the model fail to build (an intersection on a cycle
 * of tuples), which turns its fast paths off. It passes OpenFGA's validation and relates nothing else.
 */
const GENERAL_RESOLUTION = `type general_resolution
  relations
    define a: [user, general_resolution#b]
    define b: [user] and a
`

/** One model's random stream: a case replays from the run's seed and its attempt number alone. */
const caseRandom = (attempt: number) => new Random((SEED ^ Math.imul(attempt + 1, 0x9e3779b1)) >>> 0)

let database: TestDatabase
let server: OpenFgaServer
let agents: OpenFgaAgents
let admin: OpenFgaClient

/** The embedded side: a port per model over this file's database, as the contract builds it. */
const embeddedPorts: MakeContractPort = async (dsl) => {
  const port = new EmbeddedAuthorization(database.handle.db, new ModelIndex(parseModel(dsl)))
  const reset = async () => {
    await database.handle.db.deleteFrom('authz_tuples').execute()
  }
  return { port, reset, close: () => port.close() }
}

/** What a check answered: allowed, denied, or the kind of error, in terms both sides share. */
type Outcome = 'allowed' | 'denied' | 'too complex' | 'invalid request' | `error: ${string}`

const byAllowed = (allowed: boolean | undefined): Outcome => (allowed ? 'allowed' : 'denied')

function embeddedOutcome(error: unknown): Outcome {
  if (error instanceof ResolutionDepthExceededError) return 'too complex'
  if (error instanceof AuthorizationRequestError) return 'invalid request'
  return `error: ${(error as Error)?.message ?? String(error)}`
}

function openFgaOutcome(error: unknown): Outcome {
  if (error instanceof FgaApiValidationError) {
    return error.apiErrorCode === 'authorization_model_resolution_too_complex'
      ? 'too complex'
      : 'invalid request'
  }
  return `error: ${(error as Error)?.message ?? String(error)}`
}

const askEmbedded = (embedded: ContractPort, check: CheckRequest) =>
  embedded.port.check(check).then(byAllowed, embeddedOutcome)

/** A store on the OpenFGA server holding one model. */
interface OpenFgaStore {
  client: OpenFgaClient
  modelId: string
  check(check: CheckRequest): Promise<Outcome>
  write(writes: TupleKey[], deletes: TupleKey[]): Promise<void>
}

/** A store holding the model, or the reason OpenFGA refuses the model. */
async function openFgaStore(dsl: string): Promise<OpenFgaStore | { refused: string }> {
  const { id: storeId } = await admin.createStore({ name: 'differential' })
  const client = createOpenFgaClient({ apiUrl: server.url, storeId, timeoutMs: 60_000 }, agents)
  let modelId: string
  try {
    const body = parseModel(dsl) as unknown as WriteAuthorizationModelRequest
    modelId = (await client.writeAuthorizationModel(body)).authorization_model_id
  } catch (error) {
    await client.deleteStore()
    if (error instanceof FgaApiValidationError) {
      // Names quoted in the message are left out, so that the reasons can be counted.
      const reason = error.apiErrorMessage ?? error.apiErrorCode ?? 'invalid model'
      return { refused: reason.replace(/'[^']*'/g, "'…'") }
    }
    throw error
  }
  const options = { authorizationModelId: modelId }
  return {
    client,
    modelId,
    check: (check) => client.check(check, options).then(({ allowed }) => byAllowed(allowed), openFgaOutcome),
    async write(writes, deletes) {
      for (let start = 0; start < writes.length; start += 100) {
        await client.write({ writes: writes.slice(start, start + 100) }, options)
      }
      for (let start = 0; start < deletes.length; start += 100) {
        await client.write({ deletes: deletes.slice(start, start + 100) }, options)
      }
    },
  }
}

/** Whether a write was accepted (true) or refused as invalid (false). */
const accepted = (write: Promise<unknown>, refusal: (error: unknown) => boolean) =>
  write.then(
    () => true,
    (error) => {
      if (refusal(error)) return false
      throw error
    },
  )

const refusedByEmbedded = (error: unknown) => error instanceof AuthorizationRequestError
const refusedByOpenFga = (error: unknown) => error instanceof FgaApiValidationError

/**
 * The smallest set of tuples found (removing one at a time, as long as one goes) for which `differs`
 * still holds; `set` writes or deletes a tuple everywhere. Leaves the stores holding that set.
 */
async function shrink(
  tuples: TupleKey[],
  differs: () => Promise<boolean>,
  set: (tuple: TupleKey, present: boolean) => Promise<void>,
): Promise<TupleKey[]> {
  const kept = [...tuples]
  for (let removed = true; removed; ) {
    removed = false
    for (const tuple of [...kept]) {
      await set(tuple, false)
      if (await differs()) {
        kept.splice(kept.indexOf(tuple), 1)
        removed = true
      } else {
        await set(tuple, true)
      }
    }
  }
  return kept
}

const describeTuple = (t: TupleKey) => `${t.user} ${t.relation} ${t.object}`

/** The first lines of a list, and how many more there are. */
const listed = (lines: string[], shown = 20) =>
  lines.length > shown ? [...lines.slice(0, shown), `  … and ${lines.length - shown} more`] : lines

interface Difference {
  attempt: number
  dsl: string
  tuples: TupleKey[]
  lines: string[]
}

function report(difference: Difference): string {
  return [
    `seed ${SEED}, attempt ${difference.attempt}:`,
    ...difference.lines,
    'model:',
    difference.dsl.trimEnd(),
    `tuples (${difference.tuples.length}):`,
    ...difference.tuples.map((t) => `  ${describeTuple(t)}`),
  ].join('\n')
}

describe.skipIf(!openFgaAvailable)('the embedded evaluator against OpenFGA on random models', () => {
  beforeAll(async () => {
    console.log(`differential testing: seed ${SEED} (FGA_DIFF_SEED=${SEED} replays it), ${CASES} models`)
    database = await createTestDatabase()
    // OpenFGA's default of 3 s per request is short for a loaded CI machine: a check timing out would
    // be reported as a difference.
    process.env.OPENFGA_REQUEST_TIMEOUT ??= '60s'
    server = await startOpenFga()
    agents = createOpenFgaAgents()
    admin = createOpenFgaClient({ apiUrl: server.url, timeoutMs: 60_000 }, agents)
  })

  afterAll(async () => {
    agents?.http.destroy()
    agents?.https.destroy()
    await server?.stop()
    await database?.dispose()
  })

  it(
    `answers every check of ${CASES} random models as OpenFGA does, and refuses the same writes`,
    async () => {
      const started = performance.now()
      const figures = { models: 0, tuples: 0, probes: 0, checks: 0, allowed: 0, differences: 0 }
      const refused = new Map<string, number>()
      /** Checks answered as OpenFGA's general resolution does, where its fast path answers otherwise. */
      const generalOnly: string[] = []
      /** Checks whose answer, in OpenFGA, depends on which of its concurrent branches comes back first. */
      const raced: string[] = []
      const differences: Difference[] = []
      const time = { embedded: 0, openfga: 0 }
      const onEmbedded = pLimit(database.url ? 16 : 4)
      const onOpenFga = pLimit(4)

      for (let attempt = 0; figures.models < CASES; attempt++) {
        if (attempt >= CASES * ATTEMPTS_PER_CASE) {
          throw new Error(`OpenFGA refused too many models: ${JSON.stringify([...refused])}`)
        }
        const random = caseRandom(attempt)
        const model = generateModel(random)
        const dsl = modelDsl(model)
        const deployed = await openFgaStore(dsl)
        if ('refused' in deployed) {
          refused.set(deployed.refused, (refused.get(deployed.refused) ?? 0) + 1)
          continue
        }
        const general = await openFgaStore(`${dsl}${GENERAL_RESOLUTION}`)
        if ('refused' in general)
          throw new Error(`OpenFGA refused the model with a type more: ${general.refused}`)
        const embedded = await embeddedPorts(dsl)
        const lines: string[] = []
        let tuples: TupleKey[] = []
        try {
          figures.models++
          await embedded.reset()

          // Writes, valid or not, one at a time on an empty store: both accept or both refuse each.
          const probes = probeTuples(model, random, PROBES)
          figures.probes += probes.length
          for (const probe of probes) {
            const byEmbedded = await accepted(embedded.port.write([probe], []), refusedByEmbedded)
            const byOpenFga = await accepted(deployed.write([probe], []), refusedByOpenFga)
            if (byEmbedded !== byOpenFga) {
              figures.differences++
              lines.push(
                `  write ${describeTuple(probe)}: OpenFGA ${byOpenFga ? 'accepts' : 'refuses'} it, embedded ${byEmbedded ? 'accepts' : 'refuses'} it`,
              )
            }
            if (byEmbedded) await embedded.port.write([], [probe])
            if (byOpenFga) await deployed.write([], [probe])
          }

          tuples = generateTuples(model, random, TUPLES.min, TUPLES.max)
          await embedded.port.write(tuples, [])
          await deployed.write(tuples, [])
          await general.write(tuples, [])
          figures.tuples += tuples.length

          const checks = checkUniverse(model)
          figures.checks += checks.length
          const embeddedStarted = performance.now()
          const fromEmbedded = await Promise.all(
            checks.map((check) => onEmbedded(() => askEmbedded(embedded, check))),
          )
          const openFgaStarted = performance.now()
          time.embedded += openFgaStarted - embeddedStarted
          const fromOpenFga = await Promise.all(checks.map((check) => onOpenFga(() => deployed.check(check))))
          time.openfga += performance.now() - openFgaStarted

          let firstDifference: CheckRequest | undefined
          for (const [index, check] of checks.entries()) {
            const answer = fromEmbedded[index] as Outcome
            const reference = fromOpenFga[index] as Outcome
            if (reference === 'allowed') figures.allowed++
            if (answer === reference) continue
            const line = `  ${describeTuple(check)}: OpenFGA ${reference}, embedded ${answer}`
            const fromGeneral = await general.check(check)
            if (fromGeneral === answer) {
              generalOnly.push(`  attempt ${attempt}:${line} (OpenFGA's general resolution: ${answer})`)
              continue
            }
            const possible = generalResolutionAnswers(parseModel(dsl), tuples, check)
            if (possible?.has(answer as GeneralAnswer) && possible.has(fromGeneral as GeneralAnswer)) {
              raced.push(
                `  attempt ${attempt}:${line} (OpenFGA's general resolution can answer ${[...possible].join(' or ')}, depending on which branch of an intersection or exclusion comes back first)`,
              )
              continue
            }
            figures.differences++
            lines.push(
              possible ? line : `${line} (too long to work out what OpenFGA's general resolution can answer)`,
            )
            firstDifference ??= check
          }
          if (firstDifference) {
            const check = firstDifference
            const differs = async () => {
              const answer = await askEmbedded(embedded, check)
              return answer !== (await deployed.check(check)) && answer !== (await general.check(check))
            }
            const minimal = await shrink(tuples, differs, async (tuple, present) => {
              const [writes, deletes] = present ? [[tuple], []] : [[], [tuple]]
              await embedded.port.write(writes, deletes)
              await deployed.write(writes, deletes)
              await general.write(writes, deletes)
            })
            lines.push(
              `the first of them, ${describeTuple(check)}, differs with these ${minimal.length} tuples alone:`,
              ...minimal.map((t) => `  ${describeTuple(t)}`),
            )
          }
        } finally {
          await embedded.close()
          await deployed.client.deleteStore()
          await general.client.deleteStore()
        }
        if (lines.length > 0) differences.push({ attempt, dsl, tuples, lines })
      }

      const refusedModels = [...refused.values()].reduce((a, b) => a + b, 0)
      const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`
      console.log(
        [
          `differential testing, seed ${SEED}: ${figures.models} models compared; ${refusedModels} more refused by OpenFGA's validation, not compared`,
          ...[...refused].map(([reason, count]) => `  refused ${count}×: ${reason}`),
          `  ${figures.tuples} tuples, ${figures.probes} writes probed, ${figures.checks} checks (${figures.allowed} allowed by OpenFGA)`,
          `  differences: ${figures.differences}, in ${differences.length} models`,
          `  answered as OpenFGA's general resolution where its fast path answers otherwise: ${generalOnly.length}`,
          ...listed(generalOnly),
          `  answered as one of the answers OpenFGA's general resolution gives depending on the order its branches come back, not another: ${raced.length}`,
          ...listed(raced),
          `  ${seconds(performance.now() - started)} in all; checks: embedded ${seconds(time.embedded)}, OpenFGA ${seconds(time.openfga)}`,
        ].join('\n'),
      )
      if (differences.length > 0) console.log(differences.map(report).join('\n\n'))
      expect(differences.map(report)).toEqual([])
    },
    CASES * 10_000 + 30_000,
  )
})
