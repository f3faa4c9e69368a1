import { describe, expect, it } from 'vitest'
import { currentTenant, requireTenant, runWithTenant } from '../src/context.ts'
import { AppError } from '../src/errors.ts'

describe('tenant context', () => {
  it('has no tenant outside a context', () => {
    expect(currentTenant()).toBeNull()
    expect(() => requireTenant()).toThrow(AppError)
  })

  it('keeps concurrent contexts apart across awaits', async () => {
    const gates = ['org-a', 'org-b', 'org-c'].map(() => Promise.withResolvers<void>())
    const running = ['org-a', 'org-b', 'org-c'].map((org, i) =>
      runWithTenant(org, async () => {
        await gates[i]?.promise
        return requireTenant()
      }),
    )
    // Resume them in reverse order, so each continuation runs while the others are suspended.
    for (const gate of gates.toReversed()) gate.resolve()
    expect(await Promise.all(running)).toEqual(['org-a', 'org-b', 'org-c'])
  })

  it('answers ORGANIZATION_REQUIRED for a principal without organization', () => {
    const error = runWithTenant(null, () => {
      try {
        requireTenant()
      } catch (e) {
        return e as AppError
      }
    })
    expect(error?.code).toBe('ORGANIZATION_REQUIRED')
    expect(error?.status).toBe(403)
  })
})
