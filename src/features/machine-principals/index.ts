// The machine principals feature: API keys and service accounts (created by the CLI), resolved
// from their credentials on every request and cached briefly.
export { ApiKeys, LAST_USE_FLUSH_MS, ServiceAccounts } from './service.ts'
