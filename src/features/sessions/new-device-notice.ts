import type { Kysely } from 'kysely'
import type { Clock } from '../../clock.ts'
import type { Config } from '../../config.ts'
import { inTransaction } from '../../db/database.ts'
import type { Database } from '../../db/schema.ts'
import { enqueueMail } from '../../mail/outbox.ts'
import { sha256 } from '../../security/tokens.ts'
import { findAccount } from '../accounts/index.ts'
import { countDevices, recordDevice } from './known-devices.ts'

export interface NewDeviceNoticeDeps {
  db: Kysely<Database>
  clock: Clock
  config: Config
}

export interface LoginClient {
  userAgent: string | null
  ipAddress: string | null
}

/**
 * The new-device notice (opt-in with platform.auth.new-device-notice.enabled). A
 * device is the SHA-256 of the User-Agent string as the browser sends it (same browser, same OS,
 * same version = same device); the IP address is not part of it.
 */
export class NewDeviceNotice {
  readonly #deps: NewDeviceNoticeDeps

  constructor(deps: NewDeviceNoticeDeps) {
    this.#deps = deps
  }

  /** Records the login's device and, when the account has used others but not this one, mails it. */
  async onLogin(accountId: string, client: LoginClient): Promise<void> {
    if (!this.#deps.config.auth.newDeviceNotice.enabled) return
    const { db, clock } = this.#deps
    const account = await findAccount(db, accountId)
    if (!account) return
    const seenBefore = await countDevices(db, accountId)
    const now = clock.now()
    const isNew = await recordDevice(db, accountId, sha256(client.userAgent ?? ''), now)
    // The very first device of an account is not news.
    if (!isNew || seenBefore === 0) return
    await inTransaction(db, (trx) =>
      enqueueMail(
        trx,
        {
          template: 'new_device_login',
          to: account.email,
          data: {
            userAgent: client.userAgent ?? 'unknown',
            ipAddress: client.ipAddress ?? 'unknown',
            at: now.toISOString(),
          },
          organizationId: account.organization_id,
        },
        now,
      ),
    )
  }
}
