import { randomBytes } from 'node:crypto'
import type { TestProject } from 'vitest/node'
import { openPostgres } from '../../src/db/database.ts'
import { migrateToLatest } from '../../src/db/migrator.ts'
import { adminQuery, databaseUrl } from './postgres-admin.ts'

declare module 'vitest' {
  export interface ProvidedContext {
    templateDatabase: string | null
  }
}

// With TEST_DATABASE_URL, migrate one template database; each test file then clones it
// (CREATE DATABASE … TEMPLATE), which is much faster than migrating per file.
export default async function setup(project: TestProject) {
  const url = process.env.TEST_DATABASE_URL
  if (!url) {
    project.provide('templateDatabase', null)
    return
  }
  const template = `platform_test_template_${randomBytes(4).toString('hex')}`
  await adminQuery(url, `create database ${template}`)
  const handle = openPostgres(databaseUrl(url, template), { poolSize: 1 })
  try {
    await migrateToLatest(handle.db)
  } finally {
    await handle.close()
  }
  project.provide('templateDatabase', template)
  return async () => {
    await adminQuery(url, `drop database if exists ${template} with (force)`)
  }
}
