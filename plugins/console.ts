// The demo console at `/` (npm run dev, decisions 7): a plain page built on the typed client
// (client/), bundled with esbuild when the plugin starts. Never registered under production.
import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { build } from 'esbuild'
import type { FastifyInstance } from 'fastify'

const ROOT = path.resolve(import.meta.dirname, '../console')

async function consolePlugin(app: FastifyInstance) {
  const [page, bundle] = await Promise.all([
    readFile(path.join(ROOT, 'index.html'), 'utf8'),
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
  const route = { config: { public: true }, schema: { hide: true } }
  app.get('/', route, (_request, reply) => reply.type('text/html; charset=utf-8').send(page))
  app.get('/console/app.js', route, (_request, reply) =>
    reply.type('text/javascript; charset=utf-8').header('cache-control', 'no-cache').send(script),
  )
}

export default consolePlugin
