import { initializeOpenFga } from '../../src/authz/init.ts'
import { parseModel } from '../../src/authz/model.ts'
import { createOpenFgaAgents, createOpenFgaClient, OpenFgaAuthorization } from '../../src/authz/openfga.ts'
import type { TupleKey } from '../../src/authz/port.ts'
import type { MakeContractPort } from '../authz.contract.ts'

/**
 * Ports on a real OpenFGA server: each DSL gets a store and model of its own, created the way
 * `authz init` creates them, and the store is deleted on close.
 */
export function realOpenFgaPorts(apiUrl: string, apiToken?: string): MakeContractPort {
  return async (dsl) => {
    const { storeId, modelId } = await initializeOpenFga(apiUrl, apiToken, parseModel(dsl))
    const port = new OpenFgaAuthorization({ apiUrl, apiToken, storeId, modelId })
    const agents = createOpenFgaAgents()
    const admin = createOpenFgaClient({ apiUrl, apiToken, storeId }, agents)
    return {
      port,
      async reset() {
        const tuples: TupleKey[] = []
        let continuationToken: string | undefined
        do {
          const page = await admin.read(
            {},
            { pageSize: 100, ...(continuationToken ? { continuationToken } : {}) },
          )
          for (const { key } of page.tuples)
            tuples.push({ user: key.user, relation: key.relation, object: key.object })
          continuationToken = page.continuation_token || undefined
        } while (continuationToken)
        await port.write([], tuples)
      },
      async close() {
        await port.close()
        try {
          await admin.deleteStore()
        } finally {
          agents.http.destroy()
          agents.https.destroy()
        }
      },
    }
  }
}
