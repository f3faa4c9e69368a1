// The baseline: a bare Fastify route with no plugins, logging off. Every scenario is reported
// as a ratio to this, measured in the same run on the same machine.
import Fastify from 'fastify'

const app = Fastify({ logger: false })
app.get('/bare', async () => ({ status: 'UP' }))
app.get('/health/live', async () => ({ status: 'UP' }))
await app.listen({ host: '127.0.0.1', port: Number(process.env.PLATFORM_SERVER_PORT) })
process.once('SIGTERM', () => void app.close().then(() => process.exit(0)))
