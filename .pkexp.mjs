import http from 'node:http'
import { chromium } from 'playwright-core'
const server = http.createServer((req, res) => { res.setHeader('content-type','text/html'); res.end('<!doctype html><input autocomplete="username webauthn"><p>hi</p>') })
await new Promise(r => server.listen(0, '127.0.0.1', r))
const port = server.address().port
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox','--disable-gpu'] })
const context = await browser.newContext()
const page = await context.newPage()
await page.goto(`http://localhost:${port}/`)
const cdp = await context.newCDPSession(page)
await cdp.send('WebAuthn.enable')
const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', { options: { protocol: 'ctap2', transport: 'internal', hasResidentKey: true, hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true } })
const r = await page.evaluate(async () => {
  const out = {}
  out.cma = await PublicKeyCredential.isConditionalMediationAvailable?.()
  const cred = await navigator.credentials.create({ publicKey: { rp: { name: 'x', id: 'localhost' }, user: { id: new Uint8Array([1,2,3]), name: 'a', displayName: 'a' }, challenge: new Uint8Array(32), pubKeyCredParams: [{ type: 'public-key', alg: -7 }], authenticatorSelection: { residentKey: 'required', userVerification: 'required' } } })
  out.created = cred.id
  try {
    const again = await navigator.credentials.create({ publicKey: { rp: { name: 'x', id: 'localhost' }, user: { id: new Uint8Array([1,2,3]), name: 'a', displayName: 'a' }, challenge: new Uint8Array(32), pubKeyCredParams: [{ type: 'public-key', alg: -7 }], excludeCredentials: [{ type: 'public-key', id: cred.rawId }], authenticatorSelection: { residentKey: 'required', userVerification: 'required' } } })
    out.again = 'created?!'
  } catch (e) { out.again = e.name + ': ' + e.message }
  const ac = new AbortController()
  const t = setTimeout(() => ac.abort(), 3000)
  try {
    const c = await navigator.credentials.get({ mediation: 'conditional', signal: ac.signal, publicKey: { challenge: new Uint8Array(32), rpId: 'localhost', userVerification: 'required' } })
    out.conditional = 'resolved ' + c.id
  } catch (e) { out.conditional = e.name + ': ' + e.message }
  clearTimeout(t)
  return out
})
console.log(r)
await cdp.send('WebAuthn.setUserVerified', { authenticatorId, isUserVerified: false })
const r2 = await page.evaluate(async () => {
  const out = {}
  for (const uv of ['required', 'preferred', 'discouraged']) {
    try {
      const c = await navigator.credentials.get({ publicKey: { challenge: new Uint8Array(32), rpId: 'localhost', userVerification: uv } })
      const flags = new Uint8Array(c.response.authenticatorData)[32]
      out[uv] = 'ok flags=' + flags.toString(2)
    } catch (e) { out[uv] = e.name + ': ' + e.message }
  }
  return out
})
console.log(r2)
await browser.close(); server.close()
