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
const opts = { protocol: 'ctap2', transport: 'internal', hasResidentKey: true, hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true }
const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', { options: opts })
await page.evaluate(async () => {
  const cred = await navigator.credentials.create({ publicKey: { rp: { name: 'x', id: 'localhost' }, user: { id: new Uint8Array([1,2,3]), name: 'a', displayName: 'a' }, challenge: new Uint8Array(32), pubKeyCredParams: [{ type: 'public-key', alg: -7 }], authenticatorSelection: { residentKey: 'required', userVerification: 'required' } } })
})
const { credentials } = await cdp.send('WebAuthn.getCredentials', { authenticatorId })
console.log(credentials.map(c => ({...c, privateKey: c.privateKey.slice(0,10)})))
// C: presence off
await cdp.send('WebAuthn.setAutomaticPresenceSimulation', { authenticatorId, enabled: false })
const started = Date.now()
const r = await page.evaluate(async () => {
  const out = {}
  const ac = new AbortController(); const t = setTimeout(() => ac.abort(), 2000)
  try { const c = await navigator.credentials.get({ mediation: 'conditional', signal: ac.signal, publicKey: { challenge: new Uint8Array(32), rpId: 'localhost', userVerification: 'required' } }); out.conditional = 'resolved' } catch (e) { out.conditional = e.name }
  clearTimeout(t)
  const ac2 = new AbortController(); const t2 = setTimeout(() => ac2.abort(), 2000)
  try { const c = await navigator.credentials.get({ signal: ac2.signal, publicKey: { challenge: new Uint8Array(32), rpId: 'localhost', userVerification: 'required' } }); out.modal = 'resolved' } catch (e) { out.modal = e.name }
  clearTimeout(t2)
  return out
})
console.log('presence off', r, Date.now() - started)
await cdp.send('WebAuthn.setAutomaticPresenceSimulation', { authenticatorId, enabled: true })
// A: new page, no authenticator, conditional pending, then add authenticator + credential
const page2 = await context.newPage()
await page2.goto(`http://localhost:${port}/`)
const cdp2 = await context.newCDPSession(page2)
await cdp2.send('WebAuthn.enable')
await page2.evaluate(() => { window.result = 'pending'; navigator.credentials.get({ mediation: 'conditional', publicKey: { challenge: new Uint8Array(32), rpId: 'localhost', userVerification: 'required' } }).then(() => window.result = 'resolved', e => window.result = e.name) })
await new Promise(r => setTimeout(r, 500))
console.log('A before', await page2.evaluate(() => window.result))
const a2 = await cdp2.send('WebAuthn.addVirtualAuthenticator', { options: opts })
await new Promise(r => setTimeout(r, 500))
console.log('A after add auth', await page2.evaluate(() => window.result))
await cdp2.send('WebAuthn.addCredential', { authenticatorId: a2.authenticatorId, credential: credentials[0] })
await new Promise(r => setTimeout(r, 1000))
console.log('A after add cred', await page2.evaluate(() => window.result))
// modal get aborting the conditional one
await page2.evaluate(() => { window.result2 = 'pending'; navigator.credentials.get({ publicKey: { challenge: new Uint8Array(32), rpId: 'localhost', userVerification: 'required' } }).then(() => window.result2 = 'resolved', e => window.result2 = e.name) })
await new Promise(r => setTimeout(r, 1000))
console.log('modal', await page2.evaluate(() => [window.result, window.result2]))
// B: page3 with authenticator present but no credential; conditional pending; then add cred
const page3 = await context.newPage()
await page3.goto(`http://localhost:${port}/`)
const cdp3 = await context.newCDPSession(page3)
await cdp3.send('WebAuthn.enable')
const a3 = await cdp3.send('WebAuthn.addVirtualAuthenticator', { options: opts })
await page3.evaluate(() => { window.result = 'pending'; navigator.credentials.get({ mediation: 'conditional', publicKey: { challenge: new Uint8Array(32), rpId: 'localhost', userVerification: 'required' } }).then(() => window.result = 'resolved', e => window.result = e.name) })
await new Promise(r => setTimeout(r, 500))
console.log('B before', await page3.evaluate(() => window.result))
await cdp3.send('WebAuthn.addCredential', { authenticatorId: a3.authenticatorId, credential: credentials[0] })
await new Promise(r => setTimeout(r, 1000))
console.log('B after add cred', await page3.evaluate(() => window.result))
await browser.close(); server.close()
