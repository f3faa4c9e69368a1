import { randomBytes } from 'node:crypto'
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { exportPKCS8, generateKeyPair } from 'jose'

/**
 * The development JWT secret: kept under the data directory (gitignored) so sessions survive
 * restarts of `npm run dev`; created with 384 random bits on first use, readable by the owner only.
 */
export async function developmentSecret(dataDir: string): Promise<string> {
  const file = path.join(dataDir, 'dev-jwt-secret')
  try {
    return (await readFile(file, 'utf8')).trim()
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
  }
  await mkdir(dataDir, { recursive: true })
  const secret = randomBytes(48).toString('base64')
  await writeFile(file, `${secret}\n`, { mode: 0o600, flag: 'wx' }).catch(async (error) => {
    // Another process created it first: use theirs.
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
  })
  return (await readFile(file, 'utf8')).trim()
}

/**
 * The development signing key of an asymmetric `platform.auth.jwt.algorithm` (ES256 or EdDSA):
 * PKCS#8 PEM under the data directory, one file per algorithm, created on first use and readable
 * by the owner only, so tokens and the published JWK set survive restarts.
 */
export async function developmentSigningKey(dataDir: string, algorithm: 'ES256' | 'EdDSA'): Promise<string> {
  const file = path.join(dataDir, `dev-jwt-${algorithm.toLowerCase()}.pem`)
  try {
    return await readFile(file, 'utf8')
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
  }
  await mkdir(dataDir, { recursive: true })
  const { privateKey } = await generateKeyPair(algorithm, { extractable: true })
  await writeFile(file, await exportPKCS8(privateKey), { mode: 0o600, flag: 'wx' }).catch(async (error) => {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
  })
  return readFile(file, 'utf8')
}
