import { cp, readdir, readFile, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { parseArgs } from 'node:util'

// `npm run resource:new -- --name invoice [--plural invoices]`: a new tenant-scoped resource copied
// from the purchase-request template, as docs/guide.md ("Adding a resource") describes:
// - src/features/<plural>/: the template's folder (routes, schemas, service, repository, tables,
//   workflow, approval email, report), every name of the template renamed;
// - migrations/<next>_<plural>.ts: the template's migration, renamed;
// - fga-model.fga: the template's type, renamed;
// - src/app.ts, src/features/compose.ts, src/scopes.ts: each line that names the template gets a
//   twin for the new resource right after it (its import, registration, service and scopes).
// What it leaves to the team: the resource's own columns and rules, the console screen, the docs
// tag, and its tests (copy test/purchase-requests.*.test.ts the same way). On OpenFGA, write the
// new model (`npm run cli -- authz init`).

const TEMPLATE = { singular: 'purchase_request', plural: 'purchase_requests' }
const TEMPLATE_MIGRATION = '0010_purchase_requests.ts'
const TWINNED_FILES = ['src/app.ts', 'src/features/compose.ts', 'src/scopes.ts']

const NAME = /^[a-z][a-z0-9]*(_[a-z0-9]+)*$/

/** The spellings of a snake_case name the code uses. */
function spellings(snake: string) {
  const words = snake.split('_')
  const pascal = words.map((word) => word[0]?.toUpperCase() + word.slice(1)).join('')
  const human = words.join(' ')
  return {
    snake,
    kebab: words.join('-'),
    camel: pascal[0]?.toLowerCase() + pascal.slice(1),
    pascal,
    human,
    humanCapital: human[0]?.toUpperCase() + human.slice(1),
    upper: snake.toUpperCase(),
  }
}

/** The template's names paired with the new resource's, plural forms first (they contain the singular). */
export function renames(singular: string, plural: string): [string, string][] {
  const pairs: [string, string][] = []
  for (const [from, to] of [
    [TEMPLATE.plural, plural],
    [TEMPLATE.singular, singular],
  ] as const) {
    const a = spellings(from)
    const b = spellings(to)
    for (const form of ['pascal', 'camel', 'snake', 'kebab', 'humanCapital', 'human', 'upper'] as const)
      pairs.push([a[form], b[form]])
  }
  return pairs
}

export function rename(text: string, pairs: [string, string][]): string {
  return pairs.reduce((result, [from, to]) => result.replaceAll(from, to), text)
}

async function copyFolder(from: string, to: string, pairs: [string, string][]): Promise<string[]> {
  await cp(from, to, { recursive: true, errorOnExist: true, force: false })
  const files = (await readdir(to, { recursive: true, withFileTypes: true })).filter((entry) =>
    entry.isFile(),
  )
  for (const entry of files) {
    const file = path.join(entry.parentPath, entry.name)
    await writeFile(file, rename(await readFile(file, 'utf8'), pairs))
  }
  return files.map((entry) => path.join(entry.parentPath, entry.name))
}

/** The next migration number after those in the folder, four digits. */
async function nextMigration(folder: string): Promise<string> {
  const numbers = (await readdir(folder)).map((name) => Number(/^(\d+)_/.exec(name)?.[1] ?? 0))
  return String(Math.max(0, ...numbers) + 1).padStart(4, '0')
}

/** The `type <singular>` block of an OpenFGA model in the DSL: its line and the indented ones after it. */
function typeBlock(model: string, type: string): string {
  const lines = model.split('\n')
  const start = lines.findIndex((line) => line.trim() === `type ${type}`)
  if (start < 0) throw new Error(`fga-model.fga has no type ${type}`)
  let end = start + 1
  while (end < lines.length && /^\s+\S/.test(lines[end] as string)) end++
  return lines.slice(start, end).join('\n')
}

/** Each line naming the template, followed by its twin for the new resource. */
function withTwins(text: string, pairs: [string, string][]): { text: string; twins: number } {
  const names = pairs.slice(0, 4).map(([from]) => from)
  let twins = 0
  const lines = text.split('\n').flatMap((line) => {
    if (!names.some((name) => line.includes(name))) return [line]
    twins++
    return [line, rename(line, pairs)]
  })
  return { text: lines.join('\n'), twins }
}

export async function createResource(root: string, singular: string, plural: string): Promise<string[]> {
  if (!NAME.test(singular) || !NAME.test(plural))
    throw new Error('names are snake_case: invoice, sales_order')
  if (singular === TEMPLATE.singular || plural === TEMPLATE.plural) throw new Error('that is the template')
  const pairs = renames(singular, plural)
  const kebab = spellings(plural).kebab
  const done: string[] = []

  const feature = path.join(root, 'src/features', kebab)
  for (const file of await copyFolder(path.join(root, 'src/features/purchase-requests'), feature, pairs))
    done.push(path.relative(root, file))

  const migrations = path.join(root, 'migrations')
  const migration = path.join(migrations, `${await nextMigration(migrations)}_${plural}.ts`)
  await writeFile(
    migration,
    rename(await readFile(path.join(migrations, TEMPLATE_MIGRATION), 'utf8'), pairs),
    {
      flag: 'wx',
    },
  )
  done.push(path.relative(root, migration))

  const modelFile = path.join(root, 'fga-model.fga')
  const model = await readFile(modelFile, 'utf8')
  await writeFile(modelFile, `${model.trimEnd()}\n\n${rename(typeBlock(model, TEMPLATE.singular), pairs)}\n`)
  done.push('fga-model.fga')

  for (const relative of TWINNED_FILES) {
    const file = path.join(root, relative)
    const { text, twins } = withTwins(await readFile(file, 'utf8'), pairs)
    if (twins === 0) throw new Error(`${relative} names the template nowhere: follow docs/guide.md by hand`)
    await writeFile(file, text)
    done.push(`${relative} (${twins} lines)`)
  }
  return done
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { name: { type: 'string' }, plural: { type: 'string' } } })
  if (!values.name) {
    process.stderr.write('usage: npm run resource:new -- --name invoice [--plural invoices]\n')
    process.exit(2)
  }
  try {
    const written = await createResource(process.cwd(), values.name, values.plural ?? `${values.name}s`)
    process.stdout.write(`${written.map((line) => `  ${line}`).join('\n')}\n`)
  } catch (error) {
    process.stderr.write(`resource:new: ${(error as Error).message}\n`)
    process.exit(1)
  }
}
