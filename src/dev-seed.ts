import { randomBytes } from 'node:crypto'
import { readFile, writeFile } from 'node:fs/promises'
import path from 'node:path'
import type { FastifyInstance } from 'fastify'
import { findAccountByEmail } from './features/accounts/index.ts'
import { createOrganization } from './features/organizations/index.ts'

export const DEMO_EMAIL = 'admin@demo.local'

export interface DemoLogin {
  email: string
  password: string | null
  organizationId: string
}

/**
 * The demo organization and admin of `npm run dev`, created once with a random password kept in
 * the data directory (mode 0600) so the launcher can print the same login on every start.
 */
export async function ensureDemoAdmin(app: FastifyInstance, dataDir: string): Promise<DemoLogin> {
  const file = path.join(dataDir, 'demo-admin.json')
  const existing = await findAccountByEmail(app.db, DEMO_EMAIL)
  if (existing) {
    const saved = await readFile(file, 'utf8').then(
      (text) => JSON.parse(text) as { password?: string },
      () => ({}) as { password?: string },
    )
    return { email: DEMO_EMAIL, password: saved.password ?? null, organizationId: existing.organization_id }
  }
  const organization = await createOrganization(app.db, { name: 'Demo organization' })
  const password = randomBytes(12).toString('base64url')
  await app.services.users.create({
    organizationId: organization.id,
    email: DEMO_EMAIL,
    role: 'admin',
    password,
  })
  await writeFile(file, `${JSON.stringify({ email: DEMO_EMAIL, password })}\n`, { mode: 0o600 })
  return { email: DEMO_EMAIL, password, organizationId: organization.id }
}
