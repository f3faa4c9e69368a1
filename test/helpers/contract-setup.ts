import { afterEach, expect } from 'vitest'
import { takeContractViolations } from './contract.ts'

// Fails the test whose replies did not match the OpenAPI document (test/helpers/contract.ts).
afterEach(() => {
  expect(takeContractViolations(), 'replies that do not match /v3/api-docs').toEqual([])
})
