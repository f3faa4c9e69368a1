// An organization's security policies (`security.*` configuration keys): the second factor
// required of its members, the longest a session may be refreshed, the addresses its users and API
// keys may call from. Written through the organization configuration; enforced by the auth plugin
// (src/http/auth.ts) and the session refresh.

export {
  allows,
  type PolicyRoute,
  parseAllowlist,
  SECURITY_KEY_PREFIX,
  SECURITY_KEY_RULES,
  SecurityPolicies,
} from './policies.ts'
export { hasSecondFactor } from './repository.ts'
