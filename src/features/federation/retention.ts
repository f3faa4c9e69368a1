import { RETENTION_BATCH, type RetentionRule } from '../../housekeeping/runner.ts'
import { deleteExpiredFlows } from './repository.ts'

/**
 * Retention of the OpenID Connect flows: a flow is used once or expires (ten minutes, five for a
 * sign-in waiting for its second factor), so nothing is kept past its expiry.
 */
export const oidcFlowRetention: RetentionRule = {
  name: 'oidc_flows',
  sweep: (db, now) => deleteExpiredFlows(db, now, RETENTION_BATCH),
}
