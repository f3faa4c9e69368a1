import { readFile } from 'node:fs/promises'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { MODEL_FILE } from '../src/authz/model.ts'
import { type AuthorizationPort, AuthorizationRequestError, type TupleKey } from '../src/authz/port.ts'

// The authorization contract: what every adapter of the AuthorizationPort answers alike (OpenFGA's
// semantics), run by authz.embedded.test.ts and authz.openfga.test.ts. Part one exercises what
// schema 1.1 offers on a model of its own; part two the product's fga-model.fga.

export interface ContractPort {
  port: AuthorizationPort
  /** Removes every tuple, so that each test starts from an empty store. */
  reset(): Promise<void>
  close(): Promise<void>
}

/** Builds a port over the model written in `dsl` (OpenFGA DSL, schema 1.1). */
export type MakeContractPort = (dsl: string) => Promise<ContractPort>

export const CONTRACT_MODEL = `model
  schema 1.1

type user

type employee

type group
  relations
    define member: [user, employee, group#member]

type folder
  relations
    define parent: [folder]
    define owner: [user]
    define viewer: [user, group#member] or owner or viewer from parent

type document
  relations
    define parent: [folder]
    define owner: [user]
    define editor: [user, employee] or owner
    define viewer: [user, user:*, group#member] or editor or viewer from parent
    define approver: [user]
    define auditor: [user]
    define can_approve: approver and auditor
    define blocked: [user, group#member]
    define can_read: viewer but not blocked
`

const tuple = (user: string, relation: string, object: string): TupleKey => ({ user, relation, object })

export function authorizationContract(name: string, makePort: MakeContractPort): void {
  describe(`authorization contract: ${name}`, () => {
    describe('schema 1.1 model', () => {
      let subject: ContractPort
      const port = () => subject.port
      const check = (user: string, relation: string, object: string) =>
        port().check({ user, relation, object })
      const write = (...tuples: TupleKey[]) => port().write(tuples, [])

      beforeAll(async () => {
        subject = await makePort(CONTRACT_MODEL)
      })
      afterAll(async () => {
        await subject?.close()
      })
      beforeEach(async () => {
        await subject.reset()
      })

      it('allows a user related directly, and nobody else', async () => {
        await write(tuple('user:anne', 'viewer', 'document:plan'))
        expect(await check('user:anne', 'viewer', 'document:plan')).toBe(true)
        expect(await check('user:bob', 'viewer', 'document:plan')).toBe(false)
        expect(await check('user:anne', 'viewer', 'document:other')).toBe(false)
        expect(await check('user:anne', 'owner', 'document:plan')).toBe(false)
      })

      it('accepts direct tuples only for the user types the relation names', async () => {
        await write(tuple('employee:erin', 'editor', 'document:plan'))
        expect(await check('employee:erin', 'editor', 'document:plan')).toBe(true)
        await expect(write(tuple('employee:erin', 'viewer', 'document:plan'))).rejects.toThrow(
          AuthorizationRequestError,
        )
        await expect(write(tuple('user:*', 'editor', 'document:plan'))).rejects.toThrow(
          AuthorizationRequestError,
        )
        await expect(write(tuple('folder:docs', 'viewer', 'document:plan'))).rejects.toThrow(
          AuthorizationRequestError,
        )
        await expect(write(tuple('group:eng#member', 'owner', 'document:plan'))).rejects.toThrow(
          AuthorizationRequestError,
        )
        await expect(write(tuple('user:anne', 'can_read', 'document:plan'))).rejects.toThrow(
          AuthorizationRequestError,
        )
      })

      it('applies none of the tuples of a write it rejects', async () => {
        await expect(
          write(
            tuple('user:anne', 'viewer', 'document:plan'),
            tuple('employee:erin', 'viewer', 'document:plan'),
          ),
        ).rejects.toThrow(AuthorizationRequestError)
        expect(await check('user:anne', 'viewer', 'document:plan')).toBe(false)
      })

      it('rejects types and relations the model does not have, and malformed tuples', async () => {
        await expect(check('user:anne', 'viewer', 'spreadsheet:plan')).rejects.toThrow(
          AuthorizationRequestError,
        )
        await expect(check('user:anne', 'approve', 'document:plan')).rejects.toThrow(
          AuthorizationRequestError,
        )
        await expect(check('robot:r2', 'viewer', 'document:plan')).rejects.toThrow(AuthorizationRequestError)
        await expect(check('user:anne', 'viewer', 'document')).rejects.toThrow(AuthorizationRequestError)
        await expect(write(tuple('user:anne', 'viewer', 'spreadsheet:plan'))).rejects.toThrow(
          AuthorizationRequestError,
        )
        await expect(write(tuple('user:anne', 'approve', 'document:plan'))).rejects.toThrow(
          AuthorizationRequestError,
        )
      })

      it('follows userset tuples, through nested groups', async () => {
        await write(
          tuple('group:eng#member', 'viewer', 'document:plan'),
          tuple('user:anne', 'member', 'group:eng'),
          tuple('group:platform#member', 'member', 'group:eng'),
          tuple('user:carl', 'member', 'group:platform'),
          tuple('employee:erin', 'member', 'group:platform'),
        )
        expect(await check('user:anne', 'viewer', 'document:plan')).toBe(true)
        expect(await check('user:carl', 'viewer', 'document:plan')).toBe(true)
        expect(await check('employee:erin', 'viewer', 'document:plan')).toBe(true)
        expect(await check('user:bob', 'viewer', 'document:plan')).toBe(false)
        expect(await check('user:carl', 'editor', 'document:plan')).toBe(false)
      })

      it('relates every user of a type through a wildcard, and no user of another type', async () => {
        await write(tuple('user:*', 'viewer', 'document:handbook'))
        expect(await check('user:anyone', 'viewer', 'document:handbook')).toBe(true)
        expect(await check('user:anne', 'viewer', 'document:handbook')).toBe(true)
        expect(await check('employee:erin', 'viewer', 'document:handbook')).toBe(false)
        expect(await check('user:anne', 'viewer', 'document:plan')).toBe(false)
      })

      it('resolves computed usersets: an owner is an editor and a viewer, not the reverse', async () => {
        await write(tuple('user:olga', 'owner', 'document:plan'), tuple('user:ed', 'editor', 'document:plan'))
        expect(await check('user:olga', 'editor', 'document:plan')).toBe(true)
        expect(await check('user:olga', 'viewer', 'document:plan')).toBe(true)
        expect(await check('user:ed', 'viewer', 'document:plan')).toBe(true)
        expect(await check('user:ed', 'owner', 'document:plan')).toBe(false)
      })

      it('resolves tuple-to-userset through a chain of parent folders', async () => {
        await write(
          tuple('folder:root', 'parent', 'folder:projects'),
          tuple('folder:projects', 'parent', 'folder:apollo'),
          tuple('folder:apollo', 'parent', 'document:plan'),
          tuple('user:anne', 'viewer', 'folder:root'),
          tuple('user:olga', 'owner', 'folder:apollo'),
          tuple('group:eng#member', 'viewer', 'folder:projects'),
          tuple('user:carl', 'member', 'group:eng'),
        )
        expect(await check('user:anne', 'viewer', 'document:plan')).toBe(true)
        expect(await check('user:olga', 'viewer', 'document:plan')).toBe(true)
        expect(await check('user:carl', 'viewer', 'document:plan')).toBe(true)
        expect(await check('user:olga', 'viewer', 'folder:projects')).toBe(false)
        expect(await check('user:anne', 'editor', 'document:plan')).toBe(false)
        expect(await check('user:bob', 'viewer', 'document:plan')).toBe(false)
      })

      it('requires every branch of an intersection', async () => {
        await write(
          tuple('user:anne', 'approver', 'document:plan'),
          tuple('user:anne', 'auditor', 'document:plan'),
          tuple('user:bob', 'approver', 'document:plan'),
          tuple('user:carl', 'auditor', 'document:plan'),
        )
        expect(await check('user:anne', 'can_approve', 'document:plan')).toBe(true)
        expect(await check('user:bob', 'can_approve', 'document:plan')).toBe(false)
        expect(await check('user:carl', 'can_approve', 'document:plan')).toBe(false)
        expect(await check('user:dan', 'can_approve', 'document:plan')).toBe(false)
      })

      it('excludes the users of the subtracted relation, directly or through a userset', async () => {
        await write(
          tuple('user:*', 'viewer', 'document:plan'),
          tuple('user:bob', 'blocked', 'document:plan'),
          tuple('group:contractors#member', 'blocked', 'document:plan'),
          tuple('user:carl', 'member', 'group:contractors'),
        )
        expect(await check('user:anne', 'can_read', 'document:plan')).toBe(true)
        expect(await check('user:bob', 'can_read', 'document:plan')).toBe(false)
        expect(await check('user:carl', 'can_read', 'document:plan')).toBe(false)
        expect(await check('user:bob', 'viewer', 'document:plan')).toBe(true)
        expect(await check('user:anne', 'can_read', 'document:other')).toBe(false)
      })

      it('terminates on a cycle of usersets, denying whoever is in none of the groups', async () => {
        await write(
          tuple('group:a#member', 'member', 'group:b'),
          tuple('group:b#member', 'member', 'group:a'),
          tuple('group:a#member', 'viewer', 'document:plan'),
        )
        expect(await check('user:zed', 'member', 'group:a')).toBe(false)
        expect(await check('user:zed', 'viewer', 'document:plan')).toBe(false)
        await write(tuple('user:anne', 'member', 'group:b'))
        expect(await check('user:anne', 'member', 'group:a')).toBe(true)
        expect(await check('user:anne', 'viewer', 'document:plan')).toBe(true)
      })

      it('terminates on a cycle of parent folders', async () => {
        await write(tuple('folder:x', 'parent', 'folder:y'), tuple('folder:y', 'parent', 'folder:x'))
        expect(await check('user:anne', 'viewer', 'folder:x')).toBe(false)
        await write(tuple('user:anne', 'owner', 'folder:y'))
        expect(await check('user:anne', 'viewer', 'folder:x')).toBe(true)
        expect(await check('user:anne', 'viewer', 'folder:y')).toBe(true)
      })

      it('writes idempotently: a tuple written twice, a missing tuple deleted, no error', async () => {
        const anne = tuple('user:anne', 'viewer', 'document:plan')
        await port().write([anne], [])
        await port().write([anne, anne], [])
        expect(await check('user:anne', 'viewer', 'document:plan')).toBe(true)
        await port().write([], [tuple('user:bob', 'viewer', 'document:plan')])
        await port().write([], [anne])
        await port().write([], [anne])
        expect(await check('user:anne', 'viewer', 'document:plan')).toBe(false)
      })

      it('applies writes and deletes of one call together', async () => {
        await write(tuple('user:anne', 'viewer', 'document:plan'))
        await port().write(
          [tuple('user:bob', 'viewer', 'document:plan')],
          [tuple('user:anne', 'viewer', 'document:plan')],
        )
        expect(await check('user:anne', 'viewer', 'document:plan')).toBe(false)
        expect(await check('user:bob', 'viewer', 'document:plan')).toBe(true)
      })
    })

    describe('product model (fga-model.fga)', () => {
      let subject: ContractPort
      const port = () => subject.port
      const check = (user: string, relation: string, object: string) =>
        port().check({ user, relation, object })

      // Two tenants: acme with a member, an admin and an API key; globex with a member.
      const onboard = () =>
        port().write(
          [
            tuple('user:mia', 'member', 'organization:acme'),
            tuple('user:ada', 'admin', 'organization:acme'),
            tuple('api_key:k1', 'member', 'organization:acme'),
            tuple('user:gus', 'member', 'organization:globex'),
            tuple('organization:acme', 'owner_organization', 'purchase_request:pr-1'),
            tuple('organization:acme', 'owner_organization', 'purchase_request:pr-2'),
            tuple('organization:globex', 'owner_organization', 'purchase_request:pr-9'),
          ],
          [],
        )

      beforeAll(async () => {
        subject = await makePort(await readFile(MODEL_FILE, 'utf8'))
      })
      afterAll(async () => {
        await subject?.close()
      })
      beforeEach(async () => {
        await subject.reset()
        await onboard()
      })

      it("lets a member view, not edit, a purchase request of the member's organization", async () => {
        expect(await check('user:mia', 'can_view', 'purchase_request:pr-1')).toBe(true)
        expect(await check('user:mia', 'can_edit', 'purchase_request:pr-1')).toBe(false)
        expect(await check('user:gus', 'can_view', 'purchase_request:pr-9')).toBe(true)
      })

      it("lets an admin view and edit a purchase request of the admin's organization", async () => {
        expect(await check('user:ada', 'can_view', 'purchase_request:pr-1')).toBe(true)
        expect(await check('user:ada', 'can_edit', 'purchase_request:pr-1')).toBe(true)
        expect(await check('user:ada', 'member', 'organization:acme')).toBe(true)
      })

      it('denies a user of another organization both, in either direction', async () => {
        expect(await check('user:gus', 'can_view', 'purchase_request:pr-1')).toBe(false)
        expect(await check('user:gus', 'can_edit', 'purchase_request:pr-1')).toBe(false)
        expect(await check('user:mia', 'can_view', 'purchase_request:pr-9')).toBe(false)
        expect(await check('user:ada', 'can_edit', 'purchase_request:pr-9')).toBe(false)
        expect(await check('api_key:k1', 'can_view', 'purchase_request:pr-9')).toBe(false)
      })

      it('lets an API key that is a member view, and edit only once it is an admin', async () => {
        expect(await check('api_key:k1', 'can_view', 'purchase_request:pr-1')).toBe(true)
        expect(await check('api_key:k1', 'can_edit', 'purchase_request:pr-1')).toBe(false)
        await port().write([tuple('api_key:k1', 'admin', 'organization:acme')], [])
        expect(await check('api_key:k1', 'can_edit', 'purchase_request:pr-1')).toBe(true)
      })

      it('gives nobody access to a purchase request without its ownership tuple', async () => {
        expect(await check('user:ada', 'can_view', 'purchase_request:pr-new')).toBe(false)
        expect(await check('user:mia', 'can_view', 'purchase_request:pr-new')).toBe(false)
      })

      it('removes the access a deleted tuple gave', async () => {
        await port().write([], [tuple('user:mia', 'member', 'organization:acme')])
        expect(await check('user:mia', 'can_view', 'purchase_request:pr-1')).toBe(false)
        await port().write([], [tuple('organization:acme', 'owner_organization', 'purchase_request:pr-2')])
        expect(await check('user:ada', 'can_view', 'purchase_request:pr-2')).toBe(false)
        expect(await check('user:ada', 'can_view', 'purchase_request:pr-1')).toBe(true)
      })

      it('takes the same tuple written twice and a missing tuple deleted without error', async () => {
        await port().write([tuple('user:mia', 'member', 'organization:acme')], [])
        await port().write([], [tuple('user:nobody', 'member', 'organization:acme')])
        await port().write([], [tuple('organization:acme', 'owner_organization', 'purchase_request:missing')])
        expect(await check('user:mia', 'can_view', 'purchase_request:pr-1')).toBe(true)
      })

      it('rejects an ownership tuple whose owner is not an organization', async () => {
        await expect(
          port().write([tuple('user:mia', 'owner_organization', 'purchase_request:pr-3')], []),
        ).rejects.toThrow(AuthorizationRequestError)
        await expect(
          port().write([tuple('organization:acme', 'member', 'organization:globex')], []),
        ).rejects.toThrow(AuthorizationRequestError)
      })
    })
  })
}
