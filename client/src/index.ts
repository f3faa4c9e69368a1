import {
  browserSupportsWebAuthn,
  browserSupportsWebAuthnAutofill,
  type PublicKeyCredentialCreationOptionsJSON,
  type PublicKeyCredentialRequestOptionsJSON,
  startAuthentication,
  startRegistration,
  WebAuthnAbortService,
} from '@simplewebauthn/browser'
import createClient, { type Client } from 'openapi-fetch'
import type { components, paths } from './schema.ts'

// The platform's browser client: the calls are generated from /v3/api-docs (./schema.ts, through
// openapi-fetch); this layer adds what the service asks of a browser client:
// - restoreSession(): one refresh at start-up, none when this browser's storage shows no session;
//   failure means signed out;
// - a 401 on any call but login and refresh: refresh once, retry once, then report;
// - refreshes single-flight within a tab and serialised across tabs with the Web Locks API, with a
//   BroadcastChannel telling the other tabs the outcome, so no two tabs ever present one refresh
//   cookie (with the service's default, strict rotation, that would revoke the session);
// - uploads: initiate, PUT straight to the store with progress, confirm (one retry on
//   UPLOAD_NOT_FOUND after 400 ms);
// - passkeys through @simplewebauthn/browser: adding, listing, renaming and removing the signed-in
//   user's; signing in with one alone (a button, or the browser's autofill: conditional UI, which
//   any other sign-in of this client ends), or giving one to login() in place of the OTP code;
// - errors as PlatformError carrying the catalogue's `code`; the browser's own refusals of a passkey
//   ceremony as @simplewebauthn/browser's WebAuthnError (its `code`, e.g. ERROR_CEREMONY_ABORTED).

export type Schemas = components['schemas']
export type Problem = Schemas['Problem']
export type ErrorCode = Problem['code']
export type SessionResponse = Schemas['SessionResponse']
export type FileRecord = Schemas['FileRecord']
export type PasskeyRecord = Schemas['PasskeyRecord']
/** A passkey's answer to a challenge: `passkey` of login(), or the body of a passkey sign-in. */
export type PasskeyAssertion = Schemas['PasskeyAssertion']
export type PlatformApi = Client<paths>
export type { components, paths }

/** An answer other than 2xx, with the problem document's `code`. */
export class PlatformError extends Error {
  readonly status: number
  readonly code: ErrorCode | 'NETWORK_ERROR'
  readonly problem: Problem | undefined

  constructor(status: number, problem: Problem | undefined, message?: string) {
    super(message ?? problem?.detail ?? problem?.title ?? `HTTP ${status}`)
    this.name = 'PlatformError'
    this.status = status
    this.code = problem?.code ?? 'NETWORK_ERROR'
    this.problem = problem
  }
}

export type SessionState =
  | { status: 'unknown' }
  | { status: 'signed-in'; session: SessionResponse }
  | { status: 'signed-out'; reason: 'no-session' | 'logout' | 'reuse-detected' | 'expired' }

type Broadcast =
  | { type: 'signed-in'; session: SessionResponse }
  | { type: 'signed-out'; reason: 'logout' | 'reuse-detected' | 'expired' }

export interface PlatformClientOptions {
  /** Where the service answers; default: the page's origin. */
  baseUrl?: string
  /** The fetch to use (default: globalThis.fetch). */
  fetch?: typeof fetch
  /** Names the lock, channel and storage key shared by the tabs of one app (default `platform`). */
  name?: string
  /** Called whenever this tab's session state changes, including from another tab. */
  onSessionChange?: (state: SessionState) => void
}

export interface UploadOptions {
  resourceType: string
  resourceId: string
  file: Blob
  fileName: string
  /** Defaults to the Blob's type, else application/octet-stream. */
  contentType?: string
  /** Bytes sent so far, from the browser's upload progress events. */
  onProgress?: (sent: number, total: number) => void
}

/** Whether this browser can use passkeys at all (WebAuthn). */
export const passkeysSupported = (): boolean => browserSupportsWebAuthn()

/** Whether an error is a passkey ceremony ended by another one or by cancelPasskeyCeremony(). */
export const isPasskeyCeremonyAborted = (error: unknown): boolean =>
  (error as { code?: unknown } | null)?.code === 'ERROR_CEREMONY_ABORTED' ||
  (error as { name?: unknown } | null)?.name === 'AbortError'

export interface PasskeyLoginOptions {
  /** Username-first: only this account's passkeys may answer. Without it, any of this site's. */
  username?: string
  /**
   * Conditional UI: the browser offers the passkeys in the autofill of an input whose autocomplete
   * ends in `webauthn`, and the promise settles once the user picks one (usernameless: `username` is
   * not used). Ended, rejecting with ERROR_CEREMONY_ABORTED, by any sign-in of this client, another
   * passkey ceremony, or cancelPasskeyCeremony(). Rejects before asking the service for a challenge
   * where the browser offers no passkey autofill.
   */
  conditional?: boolean
}

/** The signed-in user's passkeys. */
export interface PasskeyApi {
  /** Creates a passkey on an authenticator of this device and keeps it under `name`. */
  register(name?: string): Promise<PasskeyRecord>
  /** Oldest first. */
  list(): Promise<PasskeyRecord[]>
  rename(id: string, name: string): Promise<PasskeyRecord>
  remove(id: string): Promise<void>
}

// A 401 from these is the answer itself (wrong password, refused passkey), never an expired
// access token: no refresh, and no retry, which would present a used challenge again.
const AUTH_PATHS = [
  '/api/auth/login',
  '/api/auth/refresh',
  '/api/auth/passkeys/authentication',
  '/api/auth/email-sign-in/verify',
  '/api/auth/sign-up/verify',
]
const CONFIRM_RETRY_MS = 400

export interface PlatformClient {
  /** The generated calls (openapi-fetch), with the 401 -> refresh -> retry rule applied. */
  readonly api: PlatformApi
  /**
   * The fetch behind `api` (cookies included, 401 -> refresh -> retry): give it to a client generated
   * for your own resources, `createClient<YourPaths>({ baseUrl, fetch: platform.fetch })`.
   */
  readonly fetch: (request: Request) => Promise<Response>
  readonly state: SessionState
  /**
   * One refresh at start-up: signed in if the refresh cookie still holds a session. Sends nothing
   * when localStorage holds no `${name}:refreshed-at` (written by login() and every refresh, removed
   * by logout() and by a refresh the service refuses): the state becomes signed out ('no-session'),
   * so a signed-out visitor's page makes no request. A page that signs in without this client (a form
   * posted straight to /api/auth/login) calls refresh() instead, which always asks the service.
   */
  restoreSession(): Promise<SessionState>
  /** Password sign-in; `passkey` (from passkeyAssertion()) stands in for the OTP code. */
  login(body: Schemas['LoginRequest']): Promise<SessionResponse>
  /**
   * Proves a sign-up's address with the mailed link's token or the address and code: the new
   * organization's first admin is signed in. Asking for the sign-up is `api.POST('/api/auth/sign-up')`.
   */
  verifySignUp(body: Schemas['EmailProof']): Promise<SessionResponse>
  /**
   * Signs in with the mailed link's token or the address and code (and the second factor when the
   * account has one, as login()). Asking for the mail is `api.POST('/api/auth/email-sign-in')`.
   */
  verifyEmailSignIn(body: Schemas['EmailSignInVerification']): Promise<SessionResponse>
  /**
   * Finishes an OpenID Connect provider's sign-in that waits for the account's second factor (the
   * callback sent the browser to `?oidc=second-factor` with a cookie of its own).
   */
  completeOidcSignIn(body: Schemas['OidcSecondFactor']): Promise<SessionResponse>
  /** Signs in with a passkey alone: usernameless, username-first, or through the autofill. */
  loginWithPasskey(options?: PasskeyLoginOptions): Promise<SessionResponse>
  /**
   * A passkey's answer to a fresh challenge (for this account's passkeys when `username` is given),
   * to put in login()'s body as `passkey`.
   */
  passkeyAssertion(username?: string): Promise<PasskeyAssertion>
  /** Ends the passkey ceremony under way, if any (its promise rejects with ERROR_CEREMONY_ABORTED). */
  cancelPasskeyCeremony(): void
  readonly passkeys: PasskeyApi
  logout(): Promise<void>
  /** Serialised across tabs; resolves to whether a session is live afterwards. */
  refresh(): Promise<boolean>
  upload(options: UploadOptions): Promise<FileRecord>
  /** Stops listening to the other tabs. */
  close(): void
}

const named = (name: string, message: string) => Object.assign(new Error(message), { name })

/** Throws PlatformError unless the openapi-fetch result is a success; returns its data. */
export function unwrap<T>(result: { data?: T; error?: unknown; response: Response }): T {
  if (result.response.ok) return result.data as T
  throw new PlatformError(result.response.status, result.error as Problem | undefined)
}

export function createPlatformClient(options: PlatformClientOptions = {}): PlatformClient {
  const baseUrl = (options.baseUrl ?? globalThis.location?.origin ?? '').replace(/\/$/, '')
  const baseFetch = options.fetch ?? globalThis.fetch.bind(globalThis)
  const name = options.name ?? 'platform'
  const lockName = `${name}:refresh`
  const refreshedAtKey = `${name}:refreshed-at`
  const channel =
    typeof BroadcastChannel === 'undefined' ? undefined : new BroadcastChannel(`${name}:session`)
  let state: SessionState = { status: 'unknown' }
  let inflight: Promise<boolean> | undefined
  // The conditional-UI ceremony under way, if any: a sign-in by any other way ends it.
  let autofill: object | undefined
  // Without shared storage (outside a browser), this tab's own refreshes are all there is.
  let lastRefreshInTab = 0

  const setState = (next: SessionState) => {
    state = next
    // Signed in, by whatever way and in whichever tab: the autofill's offer of passkeys is moot.
    if (next.status === 'signed-in' && autofill) WebAuthnAbortService.cancelCeremony()
    options.onSessionChange?.(next)
  }
  const announce = (message: Broadcast) => channel?.postMessage(message)
  channel?.addEventListener('message', (event: MessageEvent<Broadcast>) => {
    const message = event.data
    if (message.type === 'signed-in') setState({ status: 'signed-in', session: message.session })
    else setState({ status: 'signed-out', reason: message.reason })
  })

  // The tabs' shared record of the last sign-in or refresh, also the sign that this browser holds
  // a session at all (restoreSession). Reading it throws where the browser refuses site data.
  const storage = (): Storage | undefined => {
    try {
      return globalThis.localStorage ?? undefined
    } catch {
      return undefined
    }
  }
  const refreshedAt = (): number => {
    const stored = Number(storage()?.getItem(refreshedAtKey) ?? 0)
    return Math.max(stored, lastRefreshInTab)
  }
  const markRefreshed = () => {
    lastRefreshInTab = Date.now()
    storage()?.setItem(refreshedAtKey, String(lastRefreshInTab))
  }
  /** The session is over: the next page's restoreSession() asks nothing. */
  const forgetSession = () => storage()?.removeItem(refreshedAtKey)

  /** A sign-in or refresh the service answered: this tab and the others are signed in. */
  const signedIn = (session: SessionResponse): SessionResponse => {
    markRefreshed()
    setState({ status: 'signed-in', session })
    announce({ type: 'signed-in', session })
    return session
  }

  /** Runs `task` holding the tabs' refresh lock (in this tab only when Web Locks are missing). */
  const exclusive = <T>(task: () => Promise<T>): Promise<T> => {
    const locks = globalThis.navigator?.locks
    return locks ? (locks.request(lockName, task) as Promise<T>) : task()
  }

  const callRefresh = async (): Promise<boolean> => {
    const response = await baseFetch(`${baseUrl}/api/auth/refresh`, {
      method: 'POST',
      credentials: 'include',
    })
    if (response.ok) {
      signedIn((await response.json()) as SessionResponse)
      return true
    }
    const problem = (await response.json().catch(() => undefined)) as Problem | undefined
    if (problem?.code === 'REFRESH_TOKEN_REUSED') {
      forgetSession()
      setState({ status: 'signed-out', reason: 'reuse-detected' })
      announce({ type: 'signed-out', reason: 'reuse-detected' })
    } else if (response.status === 401) {
      forgetSession()
      const wasSignedIn = state.status === 'signed-in'
      setState({ status: 'signed-out', reason: wasSignedIn ? 'expired' : 'no-session' })
      if (wasSignedIn) announce({ type: 'signed-out', reason: 'expired' })
    } else {
      throw new PlatformError(response.status, problem)
    }
    return false
  }

  /**
   * A refresh for a 401 seen at `since`: single-flight in this tab; across tabs one at a time, and
   * skipped when another tab refreshed after `since` (its new cookies already serve this tab).
   */
  const refreshSince = (since: number): Promise<boolean> => {
    inflight ??= exclusive(async () => {
      if (refreshedAt() > since) return true
      return callRefresh()
    }).finally(() => {
      inflight = undefined
    })
    return inflight
  }

  const authFetch = async (request: Request): Promise<Response> => {
    const path = new URL(request.url).pathname
    const retry = AUTH_PATHS.includes(path) ? undefined : request.clone()
    const sentAt = Date.now()
    const response = await baseFetch(request)
    if (response.status !== 401 || !retry) return response
    // Only an expired or missing access token is cured by a refresh; a 401 about what the request
    // itself carries (a wrong current password, a wrong one-time code) is its answer, and sending
    // it again would count a second failed attempt against the account.
    const { code } = (await response
      .clone()
      .json()
      .catch(() => ({}))) as { code?: string }
    if (code !== 'AUTHENTICATION_REQUIRED') return response
    if (!(await refreshSince(sentAt))) return response
    return baseFetch(retry)
  }

  const api = createClient<paths>({ baseUrl, fetch: authFetch, credentials: 'include' })

  /** Asks the service for a challenge and the browser for a passkey's answer to it. */
  const assertion = async (username: string | undefined, conditional: boolean): Promise<PasskeyAssertion> => {
    if (conditional && !(await browserSupportsWebAuthnAutofill()))
      throw named('NotSupportedError', 'This browser offers no passkeys in its autofill')
    const { challengeId, options: optionsJSON } = unwrap(
      await api.POST('/api/auth/passkeys/authentication/options', {
        body: username === undefined || conditional ? {} : { username },
      }),
    )
    // Signed in meanwhile (the password, another tab): no autofill to offer any more.
    if (conditional && state.status === 'signed-in') throw named('AbortError', 'Signed in another way')
    const ceremony = {}
    if (conditional) autofill = ceremony
    try {
      const response = await startAuthentication({
        // The service's options are WebAuthn's JSON; the document types their members loosely.
        optionsJSON: optionsJSON as PublicKeyCredentialRequestOptionsJSON,
        useBrowserAutofill: conditional,
      })
      // The same JSON; the document types clientExtensionResults as an open object.
      return { challengeId, response: response as PasskeyAssertion['response'] }
    } finally {
      if (autofill === ceremony) autofill = undefined
    }
  }

  const passkeys: PasskeyApi = {
    async register(passkeyName) {
      const optionsJSON = unwrap(await api.POST('/api/auth/passkeys/registration/options'))
      const response = await startRegistration({
        optionsJSON: optionsJSON as PublicKeyCredentialCreationOptionsJSON,
      })
      return unwrap(
        await api.POST('/api/auth/passkeys/registration', {
          body: {
            response: response as Schemas['PasskeyRegistration']['response'],
            ...(passkeyName?.trim() ? { name: passkeyName.trim() } : {}),
          },
        }),
      )
    },
    async list() {
      return unwrap(await api.GET('/api/auth/passkeys')).items
    },
    async rename(passkeyId, passkeyName) {
      return unwrap(
        await api.PATCH('/api/auth/passkeys/{passkeyId}', {
          params: { path: { passkeyId } },
          body: { name: passkeyName },
        }),
      )
    },
    async remove(passkeyId) {
      unwrap(await api.DELETE('/api/auth/passkeys/{passkeyId}', { params: { path: { passkeyId } } }))
    },
  }

  const putWithProgress = (url: string, headers: Record<string, string>, options: UploadOptions) =>
    new Promise<void>((resolve, reject) => {
      if (typeof XMLHttpRequest === 'undefined') {
        baseFetch(url, { method: 'PUT', headers, body: options.file }).then(
          (r) =>
            r.ok
              ? resolve()
              : reject(new PlatformError(r.status, undefined, `The store refused the upload (${r.status})`)),
          reject,
        )
        return
      }
      const xhr = new XMLHttpRequest()
      xhr.open('PUT', url)
      for (const [header, value] of Object.entries(headers)) xhr.setRequestHeader(header, value)
      xhr.upload.addEventListener('progress', (event) => options.onProgress?.(event.loaded, event.total))
      xhr.addEventListener('load', () =>
        xhr.status >= 200 && xhr.status < 300
          ? resolve()
          : reject(new PlatformError(xhr.status, undefined, `The store refused the upload (${xhr.status})`)),
      )
      xhr.addEventListener('error', () =>
        reject(new PlatformError(0, undefined, 'The upload did not reach the store')),
      )
      xhr.send(options.file)
    })

  return {
    api,
    fetch: authFetch,
    get state() {
      return state
    },
    async restoreSession() {
      const store = storage()
      if (store && store.getItem(refreshedAtKey) === null) {
        setState({ status: 'signed-out', reason: 'no-session' })
        return state
      }
      await refreshSince(Date.now())
      return state
    },
    async login(body) {
      return signedIn(unwrap(await api.POST('/api/auth/login', { body })))
    },
    async verifySignUp(body) {
      return signedIn(unwrap(await api.POST('/api/auth/sign-up/verify', { body })))
    },
    async verifyEmailSignIn(body) {
      return signedIn(unwrap(await api.POST('/api/auth/email-sign-in/verify', { body })))
    },
    async completeOidcSignIn(body) {
      return signedIn(unwrap(await api.POST('/api/auth/oidc/second-factor', { body })))
    },
    async loginWithPasskey({ username, conditional = false } = {}) {
      const body = await assertion(username, conditional)
      return signedIn(unwrap(await api.POST('/api/auth/passkeys/authentication', { body })))
    },
    passkeyAssertion: (username) => assertion(username, false),
    cancelPasskeyCeremony() {
      WebAuthnAbortService.cancelCeremony()
    },
    passkeys,
    async logout() {
      await api.POST('/api/auth/logout')
      forgetSession()
      setState({ status: 'signed-out', reason: 'logout' })
      announce({ type: 'signed-out', reason: 'logout' })
    },
    refresh: () => refreshSince(Date.now()),
    async upload(upload) {
      const contentType = upload.contentType ?? (upload.file.type || 'application/octet-stream')
      // One Idempotency-Key for the initiate and its retry: when the answer is lost on the network,
      // the retry gets the same upload instead of a second PENDING file.
      const initiate = () =>
        api.POST('/api/storage/files', {
          params: { header: { 'idempotency-key': key } },
          body: {
            resourceType: upload.resourceType,
            resourceId: upload.resourceId,
            fileName: upload.fileName,
            contentType,
          },
        })
      const key = globalThis.crypto.randomUUID()
      const initiated = unwrap(await initiate().catch(() => initiate()))
      await putWithProgress(initiated.uploadUrl, initiated.uploadHeaders, upload)
      const confirm = () =>
        api.POST('/api/storage/files/{fileId}/confirm', { params: { path: { fileId: initiated.fileId } } })
      let confirmed = await confirm()
      if ((confirmed.error as Problem | undefined)?.code === 'UPLOAD_NOT_FOUND') {
        await new Promise((resolve) => setTimeout(resolve, CONFIRM_RETRY_MS))
        confirmed = await confirm()
      }
      return unwrap(confirmed)
    },
    close() {
      channel?.close()
    },
  }
}
