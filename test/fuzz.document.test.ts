import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SCOPES } from '../src/scopes.ts'
import { newActor, signIn } from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { ownedResource } from './helpers/files.ts'
import { newDeliveredApiKey, serviceBearer } from './helpers/machines.ts'

// Hostile input generated from /v3/api-docs: for every operation and every kind of principal,
// valid and invalid inputs (wrong types, missing and extra fields, huge and empty strings, Unicode
// edge cases, NUL, deep JSON, wrong content types, duplicated query parameters, percent-encoded and
// hostile path values). Every answer must be below 500, carry no stack trace or SQL text, and match
// the document for its status (the reply checker of every test app, test/helpers/contract.ts,
// records any mismatch and fails the test). FUZZ_CASES (default 12) sets the seeded cases per
// operation and principal; FUZZ_SEED the seed.
//
// A second pass is exhaustive rather than random: one valid request per operation (the document's
// examples where it gives them), then each of its values in turn (path, query, body) replaced by
// one control character string, lone surrogate or extreme number. Values PostgreSQL refuses as data
// (NUL in text, timestamps and integers out of range) must answer 400, never 503 or 500.

const CASES = Number(process.env.FUZZ_CASES ?? 12)
const SEED = Number(process.env.FUZZ_SEED ?? 20261125)

/** encodeURIComponent, but a lone surrogate goes out as its (invalid) UTF-8 bytes instead of throwing. */
function encode(value: string): string {
  try {
    return encodeURIComponent(value)
  } catch {
    return `${encodeURIComponent(value.replace(/[\ud800-\udfff]/g, ''))}%ED%A0%80`
  }
}

/** mulberry32: a small seeded generator, so a failure replays with the same seed. */
function random(seed: number) {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

type Schema = {
  $ref?: string
  type?: string | string[]
  properties?: Record<string, Schema>
  required?: string[]
  items?: Schema
  enum?: unknown[]
  examples?: unknown[]
  anyOf?: Schema[]
  format?: string
  minLength?: number
  maxLength?: number
  minimum?: number
  maximum?: number
}
interface Parameter {
  name: string
  in: 'path' | 'query' | 'header'
  required?: boolean
  schema: Schema
}
interface Operation {
  parameters?: Parameter[]
  requestBody?: { content: Record<string, { schema: Schema }> }
}

const STRANGE_STRINGS = [
  '',
  ' ',
  '\u0000',
  'a\u0000b',
  '\ud800',
  '\u202egpj.exe',
  '😀'.repeat(300),
  'x'.repeat(100_000),
  '../../etc/passwd',
  "' or 1=1 --",
  '<script>alert(1)</script>',
  '%00',
  '\r\nX-Injected: 1',
  'ǅ\u0301\u200d',
]
/** C0 controls (NUL first), DEL, lone surrogates: inside, around and instead of text. */
const CONTROL_STRINGS = [
  '\u0000',
  'a\u0000b',
  'value\u0000',
  '\u0000'.repeat(64),
  '\u0001\u0002\u0003',
  'a\tb\nc\rd',
  '\u000b\u000c\u001b[31m',
  '\u001f',
  '\u007f',
  '\ud800',
  'a\udfffb',
  '\udc00\ud800',
]
/**
 * Numbers as their literal text: beyond int4 and int8, beyond a double, negative, -0, fractions,
 * and the spellings a query string may carry that JSON may not (NaN, Infinity, hexadecimal).
 */
const EXTREME_NUMBERS = [
  '1e308',
  '-1e308',
  '1e309',
  '1e-308',
  '9223372036854775807',
  '9223372036854775808',
  '-9223372036854775809',
  '18446744073709551616',
  '2147483648',
  '-2147483649',
  '9007199254740993',
  '-1',
  '-0',
  '0',
  '1.5',
  '0.0000001',
  '1e2',
  'NaN',
  'Infinity',
  '-Infinity',
  '0x10',
]
/**
 * Valid values the document cannot give, by property name: names of the authorization model (a
 * check of an unknown type or relation stops at 400 before any tuple is looked up).
 */
const KNOWN: Record<string, string> = {
  objectType: 'purchase_request',
  relation: 'can_view',
  resourceType: 'purchase_request',
}
const JSON_NUMBER = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$/

const STRANGE_VALUES: unknown[] = [
  null,
  true,
  0,
  -1,
  1e308,
  12345,
  [],
  {},
  [1, 2],
  { a: 1 },
  ...STRANGE_STRINGS,
]

describe('hostile input generated from the document', () => {
  let t: TestApp
  let document: {
    paths: Record<string, Record<string, Operation>>
    components: { schemas: Record<string, Schema> }
  }
  const principals: { name: string; headers: Record<string, string>; cookies: Record<string, string> }[] = []
  const ids: Record<string, string> = {}

  beforeAll(async () => {
    t = await createTestApp({
      config: {
        'platform.auth.rate-limit.login-per-minute': '100000',
        'platform.auth.rate-limit.service-token-per-minute': '100000',
        'platform.auth.rate-limit.reset-per-minute': '100000',
        'platform.auth.rate-limit.invite-per-minute': '100000',
        'platform.auth.rate-limit.refresh-per-minute': '100000',
        'platform.auth.rate-limit.email-proof-per-minute': '100000',
        'platform.auth.rate-limit.email-proof-per-hour': '100000',
        // Every operation of the document answers, sign-up and email sign-in included.
        'platform.auth.sign-up.enabled': 'true',
        'platform.auth.email-sign-in.enabled': 'true',
      },
    })
    document = (await t.app.inject({ method: 'GET', url: '/v3/api-docs' })).json()
    const admin = await newActor(t.app, { role: 'admin' })
    const member = await newActor(t.app, { organizationId: admin.user.organizationId, role: 'member' })
    const key = await newDeliveredApiKey(t.app, admin.user.organizationId, [...SCOPES])
    const bearer = await serviceBearer(t.app, [...SCOPES])
    ids.orgId = admin.user.organizationId
    ids.id = await ownedResource(t.app, admin.user.organizationId)
    ids.userId = member.user.id
    principals.push(
      { name: 'anonymous', headers: {}, cookies: {} },
      { name: 'admin', headers: {}, cookies: { access_token: admin.session.access } },
      { name: 'member', headers: {}, cookies: { access_token: member.session.access } },
      { name: 'api key', headers: key.headers, cookies: {} },
      { name: 'service account', headers: bearer, cookies: {} },
    )
  }, 60_000)
  afterAll(async () => {
    await t?.close()
  })

  const resolve = (schema: Schema): Schema =>
    schema.$ref ? resolve(document.components.schemas[schema.$ref.split('/').pop() as string] ?? {}) : schema

  /** A value the schema accepts, most of the time (formats and patterns are only roughly met). */
  function valid(schema: Schema, next: () => number, depth = 0): unknown {
    const s = resolve(schema)
    if (s.examples?.length) return s.examples[0]
    if (s.enum) return s.enum[Math.floor(next() * s.enum.length)]
    if (s.anyOf) return valid(s.anyOf[Math.floor(next() * s.anyOf.length)] as Schema, next, depth)
    const type = Array.isArray(s.type) ? s.type[0] : s.type
    if (type === 'object' || s.properties) {
      const out: Record<string, unknown> = {}
      for (const [name, property] of Object.entries(s.properties ?? {})) {
        if (s.required?.includes(name) || next() < 0.5)
          out[name] = KNOWN[name] ?? valid(property, next, depth + 1)
      }
      return out
    }
    if (type === 'array') return depth > 3 ? [] : [valid(s.items ?? {}, next, depth + 1)]
    if (type === 'integer' || type === 'number') return s.minimum ?? 1
    if (type === 'boolean') return next() < 0.5
    if (s.format === 'uuid') return ids.id
    if (s.format === 'email') return 'someone@example.com'
    return 'value'.slice(0, Math.max(s.maxLength ?? 5, 1))
  }

  function mutate(body: unknown, next: () => number): unknown {
    const pick = <T>(list: readonly T[]) => list[Math.floor(next() * list.length)] as T
    const roll = next()
    if (roll < 0.1) return pick(STRANGE_VALUES)
    if (!body || typeof body !== 'object' || Array.isArray(body)) return body
    const copy: Record<string, unknown> = { ...(body as Record<string, unknown>) }
    const keys = Object.keys(copy)
    if (roll < 0.35 && keys.length > 0) delete copy[pick(keys)]
    else if (roll < 0.5) copy[`extra_${Math.floor(next() * 1000)}`] = pick(STRANGE_VALUES)
    else if (keys.length > 0) copy[pick(keys)] = pick(STRANGE_VALUES)
    return copy
  }

  function pathValue(name: string, next: () => number): string {
    const roll = next()
    if (roll < 0.6) return encode(ids[name] ?? ids.id ?? 'x')
    const hostile = ['..', '%2e%2e', '%00', 'x'.repeat(300), '%ZZ', '%F0%9F%98%80', "'", 'a%2Fb', '0']
    return hostile[Math.floor(next() * hostile.length)] as string
  }

  it('never answers 5xx, a stack trace or SQL, and always as documented', async () => {
    const next = random(SEED)
    let sent = 0
    const failures: string[] = []
    for (const [path, item] of Object.entries(document.paths)) {
      for (const [method, operation] of Object.entries(item)) {
        for (const principal of principals) {
          for (let c = 0; c < CASES; c++) {
            let url = path.replace(/\{([^}]+)\}/g, (_m, name: string) => pathValue(name, next))
            const query = (operation.parameters ?? []).filter((p) => p.in === 'query')
            const parts: string[] = []
            for (const parameter of query) {
              if (!parameter.required && next() < 0.3) continue
              const value =
                next() < 0.7
                  ? valid(parameter.schema, next)
                  : STRANGE_STRINGS[Math.floor(next() * STRANGE_STRINGS.length)]
              parts.push(`${parameter.name}=${encode(String(value))}`)
              if (next() < 0.15) parts.push(`${parameter.name}=${encode(String(value))}`)
            }
            if (parts.length > 0) url += `?${parts.join('&')}`
            const schema = operation.requestBody?.content['application/json']?.schema
            const headers: Record<string, string> = { ...principal.headers }
            let payload: string | undefined
            if (schema || next() < 0.2) {
              const body = mutate(schema ? valid(schema, next) : {}, next)
              // Now and then deep JSON: 5,000 nested arrays.
              payload = next() < 0.05 ? `${'['.repeat(5_000)}1${']'.repeat(5_000)}` : JSON.stringify(body)
              const roll = next()
              headers['content-type'] =
                roll < 0.85 ? 'application/json' : roll < 0.92 ? 'text/plain' : 'application/xml'
              if (next() < 0.03) payload = payload.slice(0, Math.max(1, payload.length - 2)) // truncated
            }
            if (next() < 0.05) headers['idempotency-key'] = next() < 0.5 ? 'k\u00e9y' : 'fuzz-key'
            const res = await t.app.inject({
              method: method.toUpperCase() as 'GET',
              url,
              headers,
              cookies: principal.cookies,
              ...(payload === undefined ? {} : { payload }),
            })
            sent++
            const what = `${principal.name} ${method.toUpperCase()} ${url.slice(0, 120)} ${payload?.slice(0, 120) ?? ''}`
            if (res.statusCode >= 500) failures.push(`${res.statusCode} ${what}: ${res.body.slice(0, 200)}`)
            if (
              /\n\s+at .+:\d+:\d+|node_modules|syntax error|relation "|violates .* constraint/i.test(res.body)
            ) {
              failures.push(`leaks internals: ${what}: ${res.body.slice(0, 200)}`)
            }
          }
        }
      }
    }
    console.log(
      `fuzz: ${sent} requests, ${failures.length} failures (seed ${SEED}, ${CASES} cases per operation and principal)`,
    )
    expect(failures).toEqual([])
    expect(sent).toBeGreaterThan(1000)
  }, 300_000)

  it('answers control characters, lone surrogates and extreme numbers in any value below 500', async () => {
    // Always the first choice: every property, the first enum value and branch, the examples.
    const first = () => 0
    const typeOf = (schema: Schema): string | undefined => {
      const s = resolve(schema)
      const type = Array.isArray(s.type) ? s.type[0] : s.type
      return type ?? (s.anyOf ? typeOf(s.anyOf[0] as Schema) : undefined)
    }
    const numeric = (schema: Schema) => ['integer', 'number'].includes(typeOf(schema) ?? '')
    // A raw JSON value in a body: the number as written, which JSON.stringify would round or refuse.
    const RAW = '\u0000raw\u0000'
    const admin = await newActor(t.app, { organizationId: ids.orgId as string, role: 'admin' })
    const key = await newDeliveredApiKey(t.app, ids.orgId as string, [...SCOPES])
    let sent = 0
    const failures: string[] = []
    for (const [path, item] of Object.entries(document.paths)) {
      for (const [method, operation] of Object.entries(item)) {
        const parameters = operation.parameters ?? []
        const pathParams = parameters.filter((p) => p.in === 'path')
        const queryParams = parameters.filter((p) => p.in === 'query')
        const bodySchema = operation.requestBody?.content['application/json']?.schema
        const body = bodySchema ? resolve(bodySchema) : undefined
        const base = {
          path: Object.fromEntries(pathParams.map((p) => [p.name, encode(ids[p.name] ?? ids.id ?? 'x')])),
          query: Object.fromEntries(
            queryParams
              .filter((p) => p.required)
              .map((p) => [p.name, encode(String(valid(p.schema, first)))]),
          ),
          body: bodySchema ? (valid(bodySchema, first) as Record<string, unknown>) : undefined,
        }
        type Variant = {
          path?: [string, string]
          query?: [string, string]
          body?: [string, unknown, string?]
        }
        const variants: Variant[] = []
        for (const p of pathParams) {
          for (const value of [...CONTROL_STRINGS, ...EXTREME_NUMBERS])
            variants.push({ path: [p.name, encode(value)] })
        }
        for (const p of queryParams) {
          for (const value of [...CONTROL_STRINGS, ...EXTREME_NUMBERS]) {
            variants.push({ query: [p.name, encode(value)] })
          }
        }
        for (const [name, property] of Object.entries(body?.properties ?? {})) {
          if (numeric(property)) {
            for (const value of EXTREME_NUMBERS.filter((n) => JSON_NUMBER.test(n))) {
              variants.push({ body: [name, RAW, value] })
            }
          } else {
            for (const value of CONTROL_STRINGS) variants.push({ body: [name, value] })
          }
        }
        // A principal per kind of caller: a user (signed in again for each operation, since some end
        // their own sessions) and an API key with every scope.
        const session = await signIn(t.app, admin.user)
        const callers: { name: string; headers: Record<string, string>; cookies: Record<string, string> }[] =
          [
            { name: 'admin', headers: {}, cookies: { access_token: session.access } },
            { name: 'api key', headers: key.headers, cookies: {} },
          ]
        for (const variant of variants) {
          const pathValues = { ...base.path, ...(variant.path ? { [variant.path[0]]: variant.path[1] } : {}) }
          const query = { ...base.query, ...(variant.query ? { [variant.query[0]]: variant.query[1] } : {}) }
          let url = path.replace(/\{([^}]+)\}/g, (_m, name: string) => pathValues[name] ?? 'x')
          const search = Object.entries(query).map(([name, value]) => `${name}=${value}`)
          if (search.length > 0) url += `?${search.join('&')}`
          let payload: string | undefined
          if (base.body) {
            const value = { ...base.body, ...(variant.body ? { [variant.body[0]]: variant.body[1] } : {}) }
            payload = JSON.stringify(value)
            if (variant.body?.[2] !== undefined)
              payload = payload.replace(JSON.stringify(RAW), variant.body[2])
          }
          for (const caller of callers) {
            const res = await t.app.inject({
              method: method.toUpperCase() as 'GET',
              url,
              headers: {
                ...caller.headers,
                ...(payload === undefined ? {} : { 'content-type': 'application/json' }),
              },
              cookies: caller.cookies,
              ...(payload === undefined ? {} : { payload }),
            })
            sent++
            const what = `${caller.name} ${method.toUpperCase()} ${url.slice(0, 160)} ${payload?.slice(0, 160) ?? ''}`
            if (res.statusCode >= 500) failures.push(`${res.statusCode} ${what}: ${res.body.slice(0, 200)}`)
            if (
              /\n\s+at .+:\d+:\d+|node_modules|syntax error|invalid byte sequence|out of range|relation "/i.test(
                res.body,
              )
            ) {
              failures.push(`leaks internals: ${what}: ${res.body.slice(0, 200)}`)
            }
          }
        }
      }
    }
    console.log(`fuzz, control characters and extreme numbers: ${sent} requests, ${failures.length} failures`)
    expect(failures).toEqual([])
    expect(sent).toBeGreaterThan(1000)
  }, 120_000)
})
