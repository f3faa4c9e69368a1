import type { RawBuilder } from 'kysely'

// Limits another room has a service count inside the statement of its unit of work: the HTTP
// layer's rate limits marked `inStatement` reach the refresh's rotation this way (built by
// src/http/rate-limit.ts `statementLimits`), so the sessions service and repository include and
// check the hits without knowing rate limits or HTTP, and the refresh stays one statement.

/** Hits rendered for another statement's `with` list. */
export interface StatementHits {
  /**
   * The CTEs `rate_hit_0 as (…), rate_hit_1 as (…), ` (a trailing comma), to open a `with` list the
   * statement's own CTEs follow; empty without hits. Each counts one hit, and only when the ones
   * before it stayed within their allowance. A data-modifying CTE runs to completion whether or not
   * the statement reads it, so the hits are counted whatever the rest of the statement does.
   */
  ctes: RawBuilder<unknown>
  /** A condition true when every hit stayed within its allowance: the guard of the statement's work. */
  within: RawBuilder<boolean>
  /** An `int[]` expression of the counts in order (null for a hit not counted after an exceeded one). */
  counts: RawBuilder<(number | null)[]>
}

/** Limits counted by one statement: the CTEs to include, and the check of their counts. */
export interface LimitsInStatement {
  hits: StatementHits
  /**
   * Throws the owner's answer (429 RATE_LIMITED for rate limits) for the first exceeded limit of the
   * counts the statement returned (its `hits.counts`).
   */
  check(counts: readonly (number | null)[]): void
}

/**
 * The port a service is handed: limits to count in its statement. `at(now)` renders them at the
 * service's own reading of the clock, so the hits fall in the windows of the instant the work is
 * done at; `none` when there is nothing to count, so a statement with no other work may be skipped.
 */
export interface StatementLimits {
  readonly none: boolean
  at(now: Date): LimitsInStatement
}
