import type { WriteAuthorizationModelRequest } from '@openfga/sdk'
import { type Config, ConfigError } from '../config.ts'
import { AppError } from '../errors.ts'
import { type AuthorizationModel, loadModel } from './model.ts'
import { createOpenFgaAgents, createOpenFgaClient, translateOpenFgaError } from './openfga.ts'
import { AuthorizationRequestError, AuthorizationUnavailableError } from './port.ts'

// Provisioning of an OpenFGA server for this service (`npm run cli -- authz init`): a store and
// the model of fga-model.fga, whose ids become platform.authz.openfga.store-id and .model-id.

export const STORE_NAME = 'platform-core'

export interface OpenFgaIds {
  storeId: string
  modelId: string
}

/**
 * Creates a store named `platform-core` and writes `model` into it. Not retried: creating a store
 * is not idempotent, and an operator can run the command again. Each call creates a new store.
 */
export async function initializeOpenFga(
  apiUrl: string,
  apiToken: string | undefined,
  model: AuthorizationModel,
  options: { timeoutMs?: number } = {},
): Promise<OpenFgaIds> {
  const agents = createOpenFgaAgents()
  const client = createOpenFgaClient({ apiUrl, apiToken, timeoutMs: options.timeoutMs ?? 10_000 }, agents)
  try {
    let storeId: string
    try {
      storeId = (await client.createStore({ name: STORE_NAME })).id
    } catch (error) {
      throw translateOpenFgaError(error, 'store creation')
    }
    try {
      // Our model type is the JSON the syntax transformer produces, which is this request's body.
      const body = model as unknown as WriteAuthorizationModelRequest
      const written = await client.writeAuthorizationModel(body, { storeId })
      return { storeId, modelId: written.authorization_model_id }
    } catch (error) {
      throw translateOpenFgaError(error, `model write (store ${storeId} was created)`)
    }
  } finally {
    agents.http.destroy()
    agents.https.destroy()
  }
}

/** The `authz init` command: the configured server, the model file, `{storeId, modelId}`. */
export async function authzInit(config: Config, model?: AuthorizationModel): Promise<OpenFgaIds> {
  const { apiUrl, apiToken } = config.authz.openfga
  if (!apiUrl) throw new ConfigError('platform.authz.openfga.api-url', 'is required by authz init')
  try {
    return await initializeOpenFga(apiUrl, apiToken, model ?? (await loadModel()))
  } catch (error) {
    if (error instanceof AuthorizationUnavailableError) {
      throw new AppError('SERVICE_UNAVAILABLE', error.message, { cause: error })
    }
    if (error instanceof AuthorizationRequestError) throw new AppError('BAD_REQUEST', error.message)
    throw error
  }
}
