import { lookup as dnsLookup, type LookupAddress } from 'node:dns'
import { isIP, type LookupFunction } from 'node:net'
import ipaddr from 'ipaddr.js'

// Where a webhook may be sent. Outside development, only https to public unicast addresses: a
// URL naming (or resolving to) loopback, private, link-local (cloud metadata at 169.254.169.254),
// unique-local, carrier-grade NAT, NAT64 or any other special range would let an organization's
// admin make the service call into its own network. The host is resolved at every delivery by
// the connection's own lookup, which refuses a refused address there, so the address checked is
// the address connected to: a DNS answer that changes between a check and the connection cannot
// slip through.

/** Why a URL or an address is refused. */
export class WebhookTargetRefused extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'WebhookTargetRefused'
  }
}

/** Whether an address is public unicast (IPv4-mapped IPv6 judged as the IPv4 address it maps). */
export function isPublicAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false
  return ipaddr.process(address).range() === 'unicast'
}

const HOST_LITERAL = /^\[(.*)\]$/

/**
 * Checks a URL an admin gives: absolute http(s), https unless private networks are allowed, no
 * credentials, and, when the host is an address literal, a public one. A name is checked when it
 * is resolved, at each delivery.
 */
export function checkWebhookUrl(text: string, allowPrivateNetworks: boolean): URL {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    throw new WebhookTargetRefused('is not an absolute URL')
  }
  if (url.protocol !== 'https:' && !(allowPrivateNetworks && url.protocol === 'http:'))
    throw new WebhookTargetRefused(allowPrivateNetworks ? 'must be http or https' : 'must be https')
  if (url.username || url.password) throw new WebhookTargetRefused('must not carry credentials')
  if (url.hash) throw new WebhookTargetRefused('must not have a fragment')
  const host = HOST_LITERAL.exec(url.hostname)?.[1] ?? url.hostname
  if (!allowPrivateNetworks && (host === 'localhost' || host.endsWith('.localhost')))
    throw new WebhookTargetRefused('must not name this machine')
  if (isIP(host) && !allowPrivateNetworks && !isPublicAddress(host))
    throw new WebhookTargetRefused('must not be a loopback, private, link-local or reserved address')
  return url
}

/** Resolves a name to its addresses (node:dns `lookup` with `all`), replaceable in tests. */
export type Resolve = (hostname: string) => Promise<LookupAddress[]>

export const systemResolve: Resolve = (hostname) =>
  new Promise((resolve, reject) =>
    dnsLookup(hostname, { all: true, verbatim: true }, (error, addresses) =>
      error ? reject(error) : resolve(addresses),
    ),
  )

/**
 * The lookup a delivery's connection uses: every address the name resolves to must be public
 * (unless private networks are allowed), or the connection is refused before it is made.
 */
export function guardedLookup(resolve: Resolve, allowPrivateNetworks: boolean): LookupFunction {
  return (hostname, options, callback) => {
    resolve(hostname).then(
      (addresses) => {
        const refused = allowPrivateNetworks ? undefined : addresses.find((a) => !isPublicAddress(a.address))
        if (refused) {
          callback(
            new WebhookTargetRefused(`${hostname} resolves to a refused address (${refused.address})`),
            '',
            0,
          )
          return
        }
        const usable = addresses.filter((a) => !options.family || a.family === options.family)
        const first = usable[0]
        if (!first) {
          callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), '', 0)
          return
        }
        if (options.all) callback(null, usable)
        else callback(null, first.address, first.family)
      },
      (error: NodeJS.ErrnoException) => callback(error, '', 0),
    )
  }
}
