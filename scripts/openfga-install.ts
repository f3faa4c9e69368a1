import { execFile } from 'node:child_process'
import { access, constants, readFile } from 'node:fs/promises'
import { homedir } from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'

// `npm run openfga:install`: builds the OpenFGA server the tests and `npm run dev` can run, from its
// Go module at the version compose.yaml's image pins (`go install …/cmd/openfga@<version>`), into a
// folder outside the repository: $OPENFGA_INSTALL_DIR, default ~/.cache/platform-core/openfga/<version>.
// A binary already there is reused. Prints the binary's path.

const run = promisify(execFile)
const ROOT = path.resolve(import.meta.dirname, '..')
const MODULE = 'github.com/openfga/openfga'

/** The OpenFGA version compose.yaml runs (`image: openfga/openfga:vX.Y.Z`). */
export async function pinnedOpenFgaVersion(): Promise<string> {
  const compose = await readFile(path.join(ROOT, 'compose.yaml'), 'utf8')
  const version = /image:\s*openfga\/openfga:(v\d+\.\d+\.\d+)\b/.exec(compose)?.[1]
  if (!version) throw new Error('compose.yaml pins no openfga/openfga:vX.Y.Z image')
  return version
}

/** Where the binary of `version` is installed. */
export function openFgaInstallDir(version: string): string {
  return (
    process.env.OPENFGA_INSTALL_DIR ?? path.join(homedir(), '.cache', 'platform-core', 'openfga', version)
  )
}

const executable = (file: string) =>
  access(file, constants.X_OK).then(
    () => true,
    () => false,
  )

/** The `go` command: on the PATH, or the toolchain's usual place. */
async function goCommand(): Promise<string> {
  for (const candidate of ['go', '/usr/local/go/bin/go']) {
    try {
      await run(candidate, ['version'])
      return candidate
    } catch {}
  }
  throw new Error('no Go toolchain: install Go (https://go.dev/doc/install) or put it on the PATH')
}

/** The path of the pinned OpenFGA binary, built first when it is not installed yet. */
export async function installOpenFga(): Promise<string> {
  const version = await pinnedOpenFgaVersion()
  const dir = openFgaInstallDir(version)
  const binary = path.join(dir, 'openfga')
  if (await executable(binary)) return binary
  const go = await goCommand()
  await run(go, ['install', `${MODULE}/cmd/openfga@${version}`], {
    env: { ...process.env, GOBIN: dir, GOFLAGS: '-mod=mod' },
    maxBuffer: 64 * 1024 * 1024,
  })
  if (!(await executable(binary))) throw new Error(`go install finished, but ${binary} is not there`)
  return binary
}

if (import.meta.main) {
  try {
    process.stdout.write(`${await installOpenFga()}\n`)
  } catch (error) {
    const { stderr } = error as { stderr?: string }
    process.stderr.write(`openfga:install: ${(error as Error).message}\n${stderr ?? ''}`)
    process.exit(1)
  }
}
