import type { FastifyBaseLogger } from 'fastify'
import type { Kysely } from 'kysely'
import { AuditChainer, AuditTrail, ChainKeys } from '../audit/index.ts'
import type { ModelIndex } from '../authz/model.ts'
import type { Permissions } from '../authz/permissions.ts'
import type { TupleRecorder } from '../authz/tuples.ts'
import type { Clock } from '../clock.ts'
import { auditChainSecrets, type Config, jwtSecrets } from '../config.ts'
import type { DatabaseHandle } from '../db/database.ts'
import type { Database } from '../db/schema.ts'
import { EventBus } from '../events.ts'
import type { SealedMailData } from '../mail/outbox.ts'
import type { MailTemplates } from '../mail/templates.ts'
import { hashParameters, PasswordHasher } from '../security/passwords.ts'
import { listenForRevocations, type RevocationListener } from '../security/revocation.ts'
import { SecretBox } from '../security/secret-box.ts'
import { AccessTokens } from '../security/tokens.ts'
import type { ObjectStore } from '../storage/port.ts'
import {
  AccountLinks,
  EmailChanges,
  EmailProofs,
  NewPasswords,
  OtpService,
  OwnAccount,
  type PasswordResetHandler,
  PasswordResets,
  SignUps,
  UserAdministration,
} from './accounts/index.ts'
import { AuditEvents } from './audit-events/index.ts'
import { FederatedSignIns, FederationRegistry, OidcFlow, ProviderDiscovery } from './federation/index.ts'
import { FileService } from './files/index.ts'
import { Impersonation, impersonationStartedTemplate } from './impersonation/index.ts'
import { ApiKeys, lastUseFlush, ServiceAccounts } from './machine-principals/index.ts'
import { OrganizationConfig } from './organizations/index.ts'
import { OutboxStatus } from './outbox-status/index.ts'
import { PasskeyService } from './passkeys/index.ts'
import { createPurchaseRequests, type PurchaseRequests } from './purchase-requests/index.ts'
import {
  hasSecondFactor,
  SECURITY_KEY_PREFIX,
  SECURITY_KEY_RULES,
  SecurityPolicies,
} from './security-policies/index.ts'
import {
  AccountAuthenticator,
  accountSessionVersions,
  bumpSessionVersion,
  type CredentialAuthenticator,
  EmailSignIns,
  endOtherUserSessions,
  endUserSessions,
  NewDeviceNotice,
  passkeyOrOtp,
  SessionGate,
  SessionService,
  type SessionVersionProvider,
} from './sessions/index.ts'
import {
  CONNECTION_KIND,
  ConnectionSignIns,
  SsoAdministration,
  ssoRequirement,
  txtLookup,
} from './sso/index.ts'
import {
  type Resolve,
  WebhookOutboxWorker,
  Webhooks,
  webhookDisabledTemplate,
  webhookFanOut,
} from './webhooks/index.ts'

// The composition root: every service is built here, once, from the infrastructure the plugins
// provide (ports) and the extensions a deployment passes to buildApp. Each binding between
// features (the second factor, a resource type for attachments, a send-time subject, an event
// listener) is one line below, so what is wired to what can be read in one place.

/** The infrastructure the services run on, provided by the plugins. */
export interface Ports {
  config: Config
  clock: Clock
  db: Kysely<Database>
  database: DatabaseHandle
  log: FastifyBaseLogger
  authz: Permissions & { tuples: TupleRecorder; model: ModelIndex }
  store: ObjectStore
  mail: { seal(data: Record<string, unknown>): SealedMailData; templates: MailTemplates }
}

/** The extension points a deployment passes to buildApp (AppDependencies). */
export interface Extensions {
  authenticator?: CredentialAuthenticator | undefined
  sessionVersionProvider?: SessionVersionProvider | undefined
  passwordResetHandler?: PasswordResetHandler | undefined
  events?: EventBus | undefined
  /** Resolves webhook endpoints' host names (default: the system's resolver). */
  webhookResolve?: Resolve | undefined
}

export interface Services {
  /** The audit trail: every feature records its events through it, in its own transaction. */
  audit: AuditTrail
  /** Links and hashes recorded events into their chains, off the request path. */
  auditChainer: AuditChainer
  /** Reading the audit trail (/api/audit-events). */
  auditEvents: AuditEvents
  tokens: AccessTokens
  passwords: PasswordHasher
  events: EventBus
  /** The credential check of login: the built-in one below, or a deployment's own. */
  authenticator: CredentialAuthenticator
  /**
   * With session versions (enabled or supplied): whether a user access token's session is still
   * live and its `ver` current. Null: user access tokens are valid until they expire.
   */
  sessionGate: SessionGate | null
  /**
   * Whether an impersonation token's session is still live, when session versions are not
   * enforced (with them, `sessionGate` decides): stopping an impersonation ends it at once.
   */
  impersonationGate: SessionGate
  /** Organizations' security policies (`security.*` keys), enforced on each request. */
  securityPolicies: SecurityPolicies
  sessions: SessionService
  serviceAccounts: ServiceAccounts
  apiKeys: ApiKeys
  users: UserAdministration
  /** Organization admins acting as their members (/api/users/{id}/impersonation, /api/impersonation). */
  impersonation: Impersonation
  /** The signed-in user's own account: GET /api/auth/me, the password change. */
  ownAccount: OwnAccount
  passwordReset: PasswordResetHandler
  /** Self-service sign-up, proved by a mailed link or code. */
  signUps: SignUps
  /** Sign-in with a mailed link or code. */
  emailSignIns: EmailSignIns
  /** The signed-in user's address change, proved by a mailed link or code. */
  emailChanges: EmailChanges
  newDeviceNotice: NewDeviceNotice
  otp: OtpService
  passkeys: PasskeyService
  orgConfig: OrganizationConfig
  files: FileService
  purchaseRequests: PurchaseRequests
  /** An organization's webhook endpoints (/api/webhooks). */
  webhooks: Webhooks
  /** Delivers the webhook outbox (started and stopped by src/features/outbox-workers.ts). */
  webhookWorker: WebhookOutboxWorker
  /** What an organization's mail and webhook outboxes hold (/api/outbox-status). */
  outboxStatus: OutboxStatus
  /** The provider kinds OpenID Connect flows resolve (`platform`; another feature registers its own). */
  federationRegistry: FederationRegistry
  /** Sign-in and linking with OpenID Connect providers (/api/auth/oidc, /api/account/identities). */
  federation: FederatedSignIns
  /** An organization's SSO connections and claimed domains (/api/organizations/current/sso). */
  sso: SsoAdministration
  /** Routing an address to its organization's connection (/api/auth/sso/start), and that sign-in. */
  ssoSignIns: ConnectionSignIns
}

/** The services and what runs beside them (the configuration listener, the API-key use flush). */
export interface ServiceRuntime {
  services: Services
  /** Starts the background parts once the app is ready. */
  start(): Promise<void>
  /** Stops them and writes what they hold (API key last use). */
  stop(): Promise<void>
}

export async function createServices(ports: Ports, extensions: Extensions = {}): Promise<ServiceRuntime> {
  const { config, clock, db, log, authz } = ports
  const { password } = config.auth

  // Events are written by the causing transaction and chained moments later; the statement that
  // chains them also queues their webhook messages.
  const auditKeys = ChainKeys.derivedFrom(auditChainSecrets(config))
  const auditChainer = new AuditChainer({ db, keys: auditKeys, fanOut: webhookFanOut, log })
  const audit = new AuditTrail(auditKeys, clock, auditChainer)

  // Authentication.
  const passwords = await PasswordHasher.create(hashParameters(password))
  const tokens = new AccessTokens(config, clock)
  const events = extensions.events ?? new EventBus()
  events.useLogger(log)
  const builtInVersions = config.auth.sessionVersion.enabled ? accountSessionVersions(db) : null
  const sessionVersions = extensions.sessionVersionProvider ?? builtInVersions
  // Organizations' security policies: read from their configuration, dropped when it changes.
  let configListening = () => false
  const securityPolicies = new SecurityPolicies({
    db,
    ttlMs: config.auth.revocation.fallbackTtl * 1000,
    now: () => clock.now().getTime(),
    hasSecondFactor: (userId) => hasSecondFactor(db, userId),
    listening: () => configListening(),
  })
  const sessions = new SessionService({
    audit,
    db,
    clock,
    config,
    tokens,
    events,
    versions: sessionVersions,
    sessionPolicy: (organizationId) => securityPolicies.sessionPolicy(organizationId),
    // Bound below, once the organization configuration it reads exists.
    signInPolicy: (user, method, context) => ssoRequired(user, method, context),
  })
  const sessionGate = sessionVersions
    ? new SessionGate({
        db,
        ttlMs: config.auth.revocation.fallbackTtl * 1000,
        provider: extensions.sessionVersionProvider ?? null,
      })
    : null
  const impersonationGate = new SessionGate({
    db,
    ttlMs: config.auth.revocation.fallbackTtl * 1000,
    provider: null,
    versions: false,
  })
  const otp = new OtpService({
    audit,
    db,
    clock,
    config,
    box: new SecretBox(jwtSecrets(config), 'otp-secret-encryption'),
  })
  const passkeys = new PasskeyService({ audit, db, clock, config })
  // A passkey of the account in place of the OTP code; otherwise the code when OTP is on: the same
  // check for a password login and an email sign-in.
  const secondFactor = passkeyOrOtp({ passkeys, otp })
  const accountAuthenticator = new AccountAuthenticator({ audit, db, clock, config, passwords, secondFactor })
  const serviceAccounts = new ServiceAccounts({ audit, db, clock, config, tokens, tuples: authz.tuples })
  const apiKeys = new ApiKeys({ audit, db, clock, config, tokens, tuples: authz.tuples, permissions: authz })

  // Accounts.
  const links = new AccountLinks({ config, sealMail: ports.mail.seal })
  const users = new UserAdministration({
    audit,
    db,
    clock,
    config,
    passwords,
    tuples: authz.tuples,
    links,
    endSessions: endUserSessions,
  })
  // Every path that gives an account a new password (reset, invitation, change) writes it here.
  const newPasswords = new NewPasswords({
    audit,
    endSessions: endUserSessions,
    endOtherSessions: endOtherUserSessions,
  })
  const passwordResets = new PasswordResets({ db, clock, config, passwords, links, newPasswords })
  const proofs = new EmailProofs({ config, sealMail: ports.mail.seal })
  const signUps = new SignUps({ audit, db, clock, config, passwords, tuples: authz.tuples, proofs })
  const emailSignIns = new EmailSignIns({ audit, db, clock, config, proofs, secondFactor })
  const emailChanges = new EmailChanges({
    audit,
    db,
    clock,
    config,
    passwords,
    proofs,
    endOtherSessions: endOtherUserSessions,
  })
  const ownAccount = new OwnAccount({ db, clock, config, passwords, newPasswords })

  // Organizations, files and the example resource.
  const orgConfig = new OrganizationConfig({
    audit,
    db,
    clock,
    permissions: authz,
    keyRules: { rules: SECURITY_KEY_RULES, closedPrefixes: [SECURITY_KEY_PREFIX] },
  })
  configListening = () => orgConfig.listening
  orgConfig.onChange((organizationId) => securityPolicies.configurationChanged(organizationId))
  const files = new FileService({
    audit,
    db,
    store: ports.store,
    authz,
    model: authz.model,
    clock,
    storage: config.storage,
  })
  // What every resource feature is built from (the purchase requests, and a team's own beside them).
  const resourcePorts = {
    audit,
    db,
    clock,
    permissions: authz,
    tuples: authz.tuples,
    templates: ports.mail.templates,
    frontendUrl: config.web.frontendUrl,
  }
  const purchaseRequests = createPurchaseRequests({ ...resourcePorts, files, configuration: orgConfig })

  // Webhooks: endpoints, and the delivery of the messages audit events queue for them.
  const webhookBox = new SecretBox(jwtSecrets(config), 'webhook-signing-secret')
  const webhooks = new Webhooks({
    db,
    permissions: authz,
    audit,
    clock,
    box: webhookBox,
    allowPrivateNetworks: config.webhooks.allowPrivateNetworks,
  })
  const webhookWorker = new WebhookOutboxWorker({
    db,
    clock,
    audit,
    box: webhookBox,
    log: log.child({ component: 'webhooks' }),
    allowPrivateNetworks: config.webhooks.allowPrivateNetworks,
    timeoutMs: config.webhooks.timeout * 1000,
    disableAfterFailures: config.webhooks.disableAfterFailures,
    disableAfterMs: config.webhooks.disableAfter * 1000,
    resolve: extensions.webhookResolve,
    listen: ports.database.listen,
  })
  ports.mail.templates.register('webhook_disabled', webhookDisabledTemplate)
  ports.mail.templates.register('impersonation_started', impersonationStartedTemplate)

  // Sign-in with OpenID Connect providers: one flow and one redirect URI for every provider kind.
  const federationRegistry = new FederationRegistry()
  const federation = new FederatedSignIns({
    audit,
    db,
    clock,
    config,
    registry: federationRegistry,
    flow: new OidcFlow({
      db,
      clock,
      registry: federationRegistry,
      discovery: new ProviderDiscovery({ clock, profile: config.profile }),
      redirectUri: `${config.web.publicUrl.replace(/\/+$/, '')}/api/auth/oidc/callback`,
    }),
    signUps,
    secondFactor,
  })
  federationRegistry.register('platform', federation.platformKind())

  // Organization single sign-on: connections (client secrets sealed) and DNS-proved domains; a
  // connection is a provider kind of the OpenID Connect flow (`connection:<id>`).
  const ssoBox = new SecretBox(jwtSecrets(config), 'sso-client-secret')
  const sso = new SsoAdministration({
    audit,
    db,
    clock,
    config,
    box: ssoBox,
    lookupTxt: txtLookup(config.dns.servers),
  })
  const ssoSignIns = new ConnectionSignIns({ audit, db, clock, box: ssoBox, tuples: authz.tuples })
  federationRegistry.register(CONNECTION_KIND, ssoSignIns.kind())
  const ssoRequired = ssoRequirement({ db, configValue: (id, key) => orgConfig.getValue(id, key) })

  // Bindings between features.
  if (builtInVersions) events.on('UserSessionsRevokedEvent', bumpSessionVersion(db))
  // Whatever holds credentials' state drops what a revocation names, on every instance.
  const revocationListeners: RevocationListener[] = [
    apiKeys,
    serviceAccounts,
    ...(sessionGate ? [sessionGate] : []),
    impersonationGate,
    securityPolicies,
  ]

  const services: Services = {
    audit,
    auditChainer,
    auditEvents: new AuditEvents({ db, permissions: authz, chainer: auditChainer }),
    tokens,
    passwords,
    events,
    authenticator: extensions.authenticator ?? accountAuthenticator,
    sessionGate,
    impersonationGate,
    securityPolicies,
    sessions,
    serviceAccounts,
    apiKeys,
    users,
    impersonation: new Impersonation({
      audit,
      db,
      clock,
      sessions,
      secondFactor,
      forgetSession: (id) => {
        for (const gate of [impersonationGate, sessionGate]) gate?.revoked({ kind: 'session', id })
      },
    }),
    ownAccount,
    passwordReset: extensions.passwordResetHandler ?? passwordResets,
    signUps,
    emailSignIns,
    emailChanges,
    newDeviceNotice: new NewDeviceNotice({ db, clock, config }),
    otp,
    passkeys,
    orgConfig,
    files,
    purchaseRequests,
    webhooks,
    webhookWorker,
    outboxStatus: new OutboxStatus({ db, permissions: authz }),
    federationRegistry,
    federation,
    sso,
    ssoSignIns,
  }

  // Last use of API keys is gathered in memory and written in one batch a minute, and on stop.
  const lastUse = lastUseFlush(apiKeys, log)
  let stopFollowingConfig: (() => Promise<void>) | undefined
  let unlistenRevocations: (() => Promise<void>) | undefined

  return {
    services,
    async start() {
      auditChainer.start()
      lastUse.start()
      stopFollowingConfig = await orgConfig.followChanges(ports.database.listen, log)
      // Every organization's security policies, read in the background: the service starts with the
      // database down (readiness says so), and until the read succeeds each policy is read per
      // organization, the read of all tried again on the next one.
      securityPolicies.loadAll().catch(() => {})
      unlistenRevocations = await listenForRevocations(ports.database.listen, revocationListeners, log)
    },
    async stop() {
      await stopFollowingConfig?.()
      await unlistenRevocations?.()
      await lastUse.stop()
      await auditChainer.stop()
    },
  }
}
