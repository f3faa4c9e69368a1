import { execFile } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { FgaApiValidationError, type OpenFgaClient, type WriteAuthorizationModelRequest } from '@openfga/sdk'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parse } from 'yaml'
import { pinnedOpenFgaVersion } from '../scripts/openfga-install.ts'
import {
  EmbeddedAuthorization,
  ResolutionDepthExceededError,
  UnsupportedModelError,
} from '../src/authz/embedded.ts'
import { ModelIndex, parseModel } from '../src/authz/model.ts'
import { createOpenFgaAgents, createOpenFgaClient, type OpenFgaAgents } from '../src/authz/openfga.ts'
import { AuthorizationRequestError, type TupleKey } from '../src/authz/port.ts'
import { createTestDatabase, type TestDatabase } from './helpers/database.ts'
import { type OpenFgaServer, openFgaAvailable, startOpenFga } from './helpers/openfga-server.ts'

// OpenFGA's own published check suites, the ones its server is tested with, run against the embedded
// evaluator: read at run time from OpenFGA's Go module at the version compose.yaml pins (downloaded
// into the Go module cache, never copied here). Each test has stages, run in order on one store: a
// model, tuples added to those before, and check assertions (a tuple and the expected answer, or
// the error expected). The same assertions are asked of the real server, which must pass them all:
// that proves this harness reads and runs the suites as OpenFGA's does.
//
// Counted apart on the embedded evaluator: assertions on models it refuses (conditions) and those
// with contextual tuples, which the port does not take. An assertion expecting an error is run, and
// passes when the evaluator refuses the request in the same way (a request error, or the resolution
// depth exceeded).

const MODULE = 'github.com/openfga/openfga'
const SUITES = ['consolidated_1_1_tests.yaml', 'abac_tests.yaml']

/**
 * Assertions the embedded evaluator is known to answer differently from OpenFGA, each with why.
 * The test fails if any of them passes (then remove it from here) or if any other assertion fails.
 */
const KNOWN_DIFFERENCES: Record<string, string> = {}

/** OpenFGA's error codes (ErrorCode in openfga/api) the suites name, by number. */
const ERROR_CODES: Record<number, string> = {
  2000: 'validation_error',
  2002: 'authorization_model_resolution_too_complex',
  2021: 'type_not_found',
  2022: 'relation_not_found',
  2027: 'invalid_tuple',
}

interface SuiteTuple extends TupleKey {
  condition?: { name: string; context?: Record<string, unknown> }
}

interface CheckAssertion {
  tuple: TupleKey
  expectation?: boolean
  errorCode?: number
  contextualTuples?: SuiteTuple[]
  context?: Record<string, unknown>
}

interface Stage {
  model: string
  tuples?: SuiteTuple[] | null
  checkAssertions?: CheckAssertion[] | null
}

interface SuiteTest {
  suite: string
  /** The test's name, with `#2`, `#3`… when the suite repeats a name. */
  name: string
  stages: Stage[]
}

const run = promisify(execFile)

/** The `go` command, on the PATH or where the toolchain installs itself; null without Go. */
async function goCommand(): Promise<string | null> {
  for (const candidate of ['go', '/usr/local/go/bin/go']) {
    try {
      await run(candidate, ['version'])
      return candidate
    } catch {}
  }
  return null
}

/** Where OpenFGA's module sources are, downloaded into the Go module cache first if need be. */
async function openFgaModuleDir(go: string): Promise<string> {
  const version = await pinnedOpenFgaVersion()
  // Outside any Go module: `go mod download module@version` then only uses the module cache.
  const { stdout } = await run(go, ['mod', 'download', '-json', `${MODULE}@${version}`], {
    cwd: tmpdir(),
    maxBuffer: 16 * 1024 * 1024,
  })
  const { Dir, Error: failure } = JSON.parse(stdout) as { Dir?: string; Error?: string }
  if (!Dir) throw new Error(`go mod download ${MODULE}@${version} failed: ${failure ?? stdout}`)
  return Dir
}

async function loadSuites(go: string): Promise<SuiteTest[]> {
  const dir = path.join(await openFgaModuleDir(go), 'assets', 'tests')
  const tests: SuiteTest[] = []
  for (const suite of SUITES) {
    const document = parse(await readFile(path.join(dir, suite), 'utf8')) as {
      tests: Array<{ name: string; stages: Stage[] }>
    }
    const seen = new Map<string, number>()
    for (const test of document.tests) {
      const occurrence = (seen.get(test.name) ?? 0) + 1
      seen.set(test.name, occurrence)
      tests.push({
        suite,
        name: occurrence === 1 ? test.name : `${test.name}#${occurrence}`,
        stages: test.stages,
      })
    }
  }
  return tests
}

const go = await goCommand()
const runnable = (openFgaAvailable && go !== null) || process.env.CI === 'true'
if (runnable && go === null) throw new Error('Go is required to read OpenFGA’s check suites from its module')
const tests = runnable && go !== null ? await loadSuites(go) : []

/** An assertion's key in KNOWN_DIFFERENCES and in reports. */
const keyOf = (test: SuiteTest, stage: number, assertion: number) =>
  `${test.suite} ${test.name} stage ${stage} assertion ${assertion}`

const describeTuple = (t: TupleKey) => `${t.user} ${t.relation} ${t.object}`

/** What a check answered: allowed, denied, or an error code in OpenFGA's terms. */
type Answer = boolean | { error: string }

const expected = (assertion: CheckAssertion): Answer =>
  assertion.errorCode === undefined
    ? assertion.expectation === true
    : { error: ERROR_CODES[assertion.errorCode] ?? `error code ${assertion.errorCode}` }

const same = (a: Answer, b: Answer) => JSON.stringify(a) === JSON.stringify(b)
const show = (a: Answer) => (typeof a === 'boolean' ? (a ? 'allowed' : 'denied') : a.error)

function embeddedAnswer(error: unknown): Answer {
  if (error instanceof ResolutionDepthExceededError) return { error: ERROR_CODES[2002] as string }
  // OpenFGA's codes for a request the model cannot express vary with what is wrong; the port has one error.
  if (error instanceof AuthorizationRequestError) return { error: 'request error' }
  throw error
}

/** Whether the evaluator's answer is the one expected, an error of the port matching any request error code. */
function embeddedPasses(answer: Answer, assertion: CheckAssertion): boolean {
  if (assertion.errorCode === undefined || assertion.errorCode === 2002)
    return same(answer, expected(assertion))
  return typeof answer !== 'boolean' && answer.error === 'request error'
}

const figures = {
  tests: 0,
  models: { accepted: 0, refused: 0 },
  run: 0,
  passed: 0,
  expectedErrors: { run: 0, passed: 0 },
  apart: { refusedModel: 0, contextualTuples: 0 },
  server: { run: 0, passed: 0 },
  failing: [] as string[],
}

describe.skipIf(!runnable)('OpenFGA’s published check suites', () => {
  let database: TestDatabase
  let server: OpenFgaServer
  let agents: OpenFgaAgents
  let admin: OpenFgaClient
  const started = performance.now()

  beforeAll(async () => {
    database = await createTestDatabase()
    server = await startOpenFga()
    agents = createOpenFgaAgents()
    admin = createOpenFgaClient({ apiUrl: server.url, timeoutMs: 30_000 }, agents)
  })

  afterAll(async () => {
    agents?.http.destroy()
    agents?.https.destroy()
    await server?.stop()
    await database?.dispose()
    const seconds = ((performance.now() - started) / 1000).toFixed(1)
    console.log(
      [
        `OpenFGA's check suites (${SUITES.join(', ')}): ${figures.tests} tests, in ${seconds} s`,
        `  models: ${figures.models.accepted} accepted by the embedded evaluator, ${figures.models.refused} refused (conditions)`,
        `  assertions run on the embedded evaluator: ${figures.run}, passed ${figures.passed}; of them expecting an error: ${figures.expectedErrors.run}, passed ${figures.expectedErrors.passed}`,
        `  counted apart: ${figures.apart.refusedModel} on refused models, ${figures.apart.contextualTuples} with contextual tuples`,
        `  known differences: ${Object.keys(KNOWN_DIFFERENCES).length}; failing: ${figures.failing.length}`,
        `  the real server: ${figures.server.passed} of ${figures.server.run} assertions passed`,
      ].join('\n'),
    )
  })

  it('names only assertions the suites have among its known differences', () => {
    const keys = new Set(
      tests.flatMap((test) =>
        test.stages.flatMap((stage, s) => (stage.checkAssertions ?? []).map((_, a) => keyOf(test, s, a))),
      ),
    )
    expect(Object.keys(KNOWN_DIFFERENCES).filter((key) => !keys.has(key))).toEqual([])
  })

  for (const test of tests) {
    it(`${test.suite}: ${test.name}`, async () => {
      figures.tests++
      await database.handle.db.deleteFrom('authz_tuples').execute()
      const { id: storeId } = await admin.createStore({ name: 'suites' })
      const client = createOpenFgaClient({ apiUrl: server.url, storeId, timeoutMs: 30_000 }, agents)
      const serverFailures: string[] = []
      const failures: string[] = []
      const knownPassing: string[] = []
      try {
        for (const [s, stage] of test.stages.entries()) {
          const model = parseModel(stage.model)
          const { authorization_model_id: modelId } = await client.writeAuthorizationModel(
            model as unknown as WriteAuthorizationModelRequest,
          )
          const options = { authorizationModelId: modelId }
          const tuples = stage.tuples ?? []
          for (let start = 0; start < tuples.length; start += 40) {
            await client.write({ writes: tuples.slice(start, start + 40) }, options)
          }

          let embedded: EmbeddedAuthorization | undefined
          try {
            embedded = new EmbeddedAuthorization(database.handle.db, new ModelIndex(model))
            figures.models.accepted++
          } catch (error) {
            if (!(error instanceof UnsupportedModelError)) throw error
            figures.models.refused++
          }
          if (embedded) await embedded.write(tuples, [])

          for (const [a, assertion] of (stage.checkAssertions ?? []).entries()) {
            const key = keyOf(test, s, a)
            const want = expected(assertion)
            const what = `${describeTuple(assertion.tuple)}: expected ${show(want)}`

            figures.server.run++
            const fromServer: Answer = await client
              .check(
                {
                  ...assertion.tuple,
                  ...(assertion.contextualTuples ? { contextualTuples: assertion.contextualTuples } : {}),
                  ...(assertion.context ? { context: assertion.context } : {}),
                },
                options,
              )
              .then(
                ({ allowed }) => allowed === true,
                (error) => {
                  if (error instanceof FgaApiValidationError) return { error: error.apiErrorCode as string }
                  throw error
                },
              )
            if (same(fromServer, want)) figures.server.passed++
            else serverFailures.push(`${key}: ${what}, the server answered ${show(fromServer)}`)

            if (!embedded) {
              figures.apart.refusedModel++
              continue
            }
            if (assertion.contextualTuples) {
              figures.apart.contextualTuples++
              continue
            }
            figures.run++
            if (assertion.errorCode !== undefined) figures.expectedErrors.run++
            const answer = await embedded
              .check(assertion.tuple)
              .then((allowed): Answer => allowed, embeddedAnswer)
            const passes = embeddedPasses(answer, assertion)
            if (passes) {
              figures.passed++
              if (assertion.errorCode !== undefined) figures.expectedErrors.passed++
            } else {
              figures.failing.push(key)
            }
            const known = key in KNOWN_DIFFERENCES
            if (passes && known) knownPassing.push(`${key}: ${what}, and the embedded evaluator now passes`)
            if (!passes && !known) {
              failures.push(
                [
                  `${key}: ${what}, the embedded evaluator answered ${show(answer)}`,
                  'model:',
                  stage.model.trimEnd(),
                  'tuples, this stage and those before:',
                  ...test.stages
                    .slice(0, s + 1)
                    .flatMap((st) => (st.tuples ?? []).map((t) => `  ${describeTuple(t)}`)),
                ].join('\n'),
              )
            }
          }
        }
      } finally {
        await client.deleteStore()
      }
      expect(
        serverFailures,
        'the real server answered differently from the suite: the harness is wrong',
      ).toEqual([])
      expect(knownPassing, 'a known difference passes: remove it from KNOWN_DIFFERENCES').toEqual([])
      expect(failures).toEqual([])
    })
  }
})
