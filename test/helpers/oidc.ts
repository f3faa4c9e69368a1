import { randomBytes } from 'node:crypto'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { exportJWK, generateKeyPair, type JWTPayload, SignJWT } from 'jose'
import Provider from 'oidc-provider'

// Identity providers for the OpenID Connect tests, on loopback over http (the test profile allows
// it): oidc-provider itself (OpenID-certified, its own login and consent pages), and a small issuer
// of our own that answers the token request with whatever ID token a test crafts.

export interface ProviderAccount {
  email: string
  email_verified?: boolean
  name?: string
  /** Microsoft Entra's "email domain owner verified" claim. */
  xms_edov?: boolean
}

export interface RunningProvider {
  issuer: string
  clientId: string
  clientSecret: string
  /** The accounts it knows, by login name (the subject is the login name). */
  accounts: Map<string, ProviderAccount>
  close(): Promise<void>
}

const listen = async (server: Server): Promise<number> => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return (server.address() as AddressInfo).port
}

const closeServer = (server: Server) =>
  new Promise<void>((resolve) => {
    server.closeAllConnections()
    server.close(() => resolve())
  })

/** An oidc-provider instance with one confidential client for `redirectUri`. */
export async function startOidcProvider(redirectUri: string): Promise<RunningProvider> {
  const server = createServer()
  const port = await listen(server)
  const issuer = `http://127.0.0.1:${port}`
  const clientId = `client-${randomBytes(4).toString('hex')}`
  const clientSecret = randomBytes(24).toString('base64url')
  const accounts = new Map<string, ProviderAccount>()
  const { privateKey } = await generateKeyPair('RS256', { extractable: true })
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: clientId,
        client_secret: clientSecret,
        redirect_uris: [redirectUri],
        response_types: ['code'],
        grant_types: ['authorization_code'],
        token_endpoint_auth_method: 'client_secret_post',
      },
    ],
    jwks: { keys: [{ ...(await exportJWK(privateKey)), kid: 'test-key', alg: 'RS256', use: 'sig' }] },
    cookies: { keys: [randomBytes(32).toString('hex')] },
    claims: { openid: ['sub'], email: ['email', 'email_verified', 'xms_edov'], profile: ['name'] },
    // The claims of the requested scopes go into the ID token, as Google and Entra put them.
    conformIdTokenClaims: false,
    pkce: { required: () => true },
    ttl: { Interaction: 600, Session: 3600, Grant: 3600, AccessToken: 600, IdToken: 600 },
    features: { devInteractions: { enabled: true } },
    findAccount: async (_ctx, sub) => {
      const account = accounts.get(sub)
      if (!account) return undefined
      return { accountId: sub, claims: async () => ({ sub, ...account }) }
    },
  })
  // Its warnings about development defaults are expected here.
  provider.on('server_error', () => {})
  server.on('request', provider.callback())
  return { issuer, clientId, clientSecret, accounts, close: () => closeServer(server) }
}

/** A tiny cookie jar: the provider's cookies, by name, sent back on every request to it. */
class Jar {
  readonly #cookies = new Map<string, string>()
  header(): string {
    return [...this.#cookies].map(([name, value]) => `${name}=${value}`).join('; ')
  }
  take(response: Response) {
    for (const line of response.headers.getSetCookie()) {
      const [pair = ''] = line.split(';')
      const at = pair.indexOf('=')
      this.#cookies.set(pair.slice(0, at).trim(), pair.slice(at + 1).trim())
    }
  }
}

/**
 * Follows the provider's pages without a browser, as the person `login` would: the login form,
 * then the consent form. Returns the URL the provider finally redirects to (the callback, with
 * `code`, `state` and `iss`), without requesting it.
 */
export async function passProviderPages(authorizationUrl: string, login: string): Promise<URL> {
  const jar = new Jar()
  let url = new URL(authorizationUrl)
  const origin = url.origin
  let method = 'GET'
  let body: URLSearchParams | undefined
  for (let hop = 0; hop < 20; hop++) {
    const response = await fetch(url, {
      method,
      redirect: 'manual',
      headers: {
        cookie: jar.header(),
        ...(body ? { 'content-type': 'application/x-www-form-urlencoded' } : {}),
      },
      body,
    })
    jar.take(response)
    await response.arrayBuffer()
    const location = response.headers.get('location')
    if (response.status >= 300 && response.status < 400 && location) {
      url = new URL(location, url)
      method = 'GET'
      body = undefined
      if (url.origin !== origin) return url
      continue
    }
    if (response.status !== 200 || !url.pathname.startsWith('/interaction/')) {
      throw new Error(`unexpected answer from the provider: ${response.status} at ${url.pathname}`)
    }
    // An interaction page: the login form first, then the consent form, both posted to the same URL.
    const page = await fetch(url, { headers: { cookie: jar.header() } }).then((r) => r.text())
    method = 'POST'
    body = page.includes('name="login"')
      ? new URLSearchParams({ prompt: 'login', login, password: 'any' })
      : new URLSearchParams({ prompt: 'consent' })
  }
  throw new Error('the provider never redirected back')
}

/** A small issuer whose token endpoint answers with the ID token the test sets. */
export interface CraftingIssuer {
  issuer: string
  clientId: string
  clientSecret: string
  /** Sign claims with the issuer's key (or as `alg: none`, or with a key nobody published). */
  sign(claims: JWTPayload, how?: 'valid' | 'none' | 'foreign-key'): Promise<string>
  /** The ID token the next token request gets. */
  nextIdToken: string
  close(): Promise<void>
}

export async function startCraftingIssuer(): Promise<CraftingIssuer> {
  const server = createServer()
  const port = await listen(server)
  const issuer = `http://127.0.0.1:${port}`
  const clientId = 'crafted-client'
  const clientSecret = randomBytes(24).toString('base64url')
  const { privateKey, publicKey } = await generateKeyPair('RS256', { extractable: true })
  const foreign = await generateKeyPair('RS256')
  const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' }
  const state: CraftingIssuer = {
    issuer,
    clientId,
    clientSecret,
    nextIdToken: '',
    async sign(claims, how = 'valid') {
      if (how === 'none') {
        const encode = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url')
        return `${encode({ alg: 'none', typ: 'JWT' })}.${encode(claims)}.`
      }
      return new SignJWT(claims)
        .setProtectedHeader({ alg: 'RS256', kid: 'k1' })
        .sign(how === 'foreign-key' ? foreign.privateKey : privateKey)
    },
    close: () => closeServer(server),
  }
  server.on('request', (request, response) => {
    const json = (value: unknown) => {
      response.writeHead(200, { 'content-type': 'application/json' })
      response.end(JSON.stringify(value))
    }
    if (request.url === '/.well-known/openid-configuration') {
      return json({
        issuer,
        authorization_endpoint: `${issuer}/authorize`,
        token_endpoint: `${issuer}/token`,
        jwks_uri: `${issuer}/jwks`,
        response_types_supported: ['code'],
        subject_types_supported: ['public'],
        id_token_signing_alg_values_supported: ['RS256'],
        code_challenge_methods_supported: ['S256'],
        authorization_response_iss_parameter_supported: true,
      })
    }
    if (request.url === '/jwks') return json({ keys: [jwk] })
    if (request.url === '/token' && request.method === 'POST') {
      request.resume()
      request.on('end', () =>
        json({ access_token: 'at', token_type: 'Bearer', expires_in: 60, id_token: state.nextIdToken }),
      )
      return
    }
    response.writeHead(404).end()
  })
  return state
}
