// The retention rules: what each table that grows with traffic keeps, and for how long; the
// housekeeping worker runs them.
export { retentionRules } from './rules.ts'
