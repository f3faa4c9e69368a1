// The demo console at `/` (npm run dev): a plain page built on the typed client
// (client/), bundled with esbuild when the plugin starts. Never registered under production.
import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { build } from 'esbuild'
import type { FastifyInstance, FastifyReply } from 'fastify'

const ROOT = path.resolve(import.meta.dirname, '../../console')

/**
 * The console pages mails link to (under platform.web.frontend-url, the token in the query): the
 * invitation, the password reset, the sign-up, the email sign-in and the email change.
 */
export const MAILED_LINK_PAGES = [
  '/accept-invitation',
  '/reset-password',
  '/verify-sign-up',
  '/email-sign-in',
  '/verify-email',
] as const

async function consolePlugin(app: FastifyInstance) {
  const [page, styles, bundle] = await Promise.all([
    readFile(path.join(ROOT, 'index.html'), 'utf8'),
    readFile(path.join(ROOT, 'app.css'), 'utf8'),
    build({
      entryPoints: [path.join(ROOT, 'src/main.ts')],
      bundle: true,
      format: 'esm',
      target: 'es2022',
      minify: true,
      write: false,
      logLevel: 'silent',
    }),
  ])
  const script = bundle.outputFiles[0]?.text ?? ''
  // The sign-in form offers the self-service flows this deployment has switched on (their endpoints
  // answer 404 otherwise): named in the page itself, so the form shows them without asking.
  const { signUp, emailSignIn } = app.config.auth
  const flows = [signUp.enabled ? 'sign-up' : '', emailSignIn.enabled ? 'email-sign-in' : '']
  const html = page.replace(
    '<meta name="platform-sign-in" content="">',
    `<meta name="platform-sign-in" content="${flows.filter(Boolean).join(' ')}">`,
  )
  const route = { config: { public: true }, schema: { hide: true } }
  // The API's policy is `default-src 'none'`; the page may load its own script and styles, show
  // the QR code's inline SVG, and call the service and the object store (uploads go there).
  const { endpoint, publicEndpoint } = app.config.storage.s3
  const store = new URL(publicEndpoint ?? endpoint).origin
  const policy = [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    `connect-src 'self' ${store}`,
    "form-action 'self'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
  ].join('; ')
  const sendPage = (_request: unknown, reply: FastifyReply) =>
    reply
      .type('text/html; charset=utf-8')
      .header('content-security-policy', policy)
      // A link's token is in the address: the page is not kept, and opening it (GET or HEAD, any
      // number of times, by a person or a mail scanner) uses nothing; only the page's button posts.
      .header('cache-control', 'no-store')
      .send(html)
  app.get('/', route, sendPage)
  // The pages the mailed links open, each showing what its button will do.
  for (const path of MAILED_LINK_PAGES) app.get(path, route, sendPage)
  app.get('/console/app.css', route, (_request, reply) =>
    reply.type('text/css; charset=utf-8').header('cache-control', 'no-cache').send(styles),
  )
  app.get('/console/app.js', route, (_request, reply) =>
    reply.type('text/javascript; charset=utf-8').header('cache-control', 'no-cache').send(script),
  )
}

export default consolePlugin
