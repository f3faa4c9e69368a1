import type { ColumnType, Generated, Kysely, Transaction } from 'kysely'

// One interface per table, assembled into `Database`. SQL is snake_case; the API maps to
// camelCase next to each route.

export type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>

export interface OrganizationTable {
  id: Generated<string>
  name: string
  created_at: Generated<Timestamp>
}

export interface Database {
  organizations: OrganizationTable
}

/** Anything queries can run on: the pool-backed instance or an open transaction. */
export type Executor = Kysely<Database> | Transaction<Database>
export type Tx = Transaction<Database>
