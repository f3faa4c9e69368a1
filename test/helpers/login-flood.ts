import http from 'node:http'
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads'

// A bounded login flood on loopback: `total` POST /api/auth/login, `concurrency` at a time, over
// keep-alive connections, each from a source address of 127.0.0.0/8 (Linux routes the whole block
// to loopback, so one machine can be many clients). It runs in a worker thread, so the test's own
// event loop stays free to time the service's other endpoints during the flood.

export interface FloodOptions {
  base: string
  total: number
  concurrency: number
  /** Usernames, used round robin. */
  usernames: string[]
  password: string
  /** Source addresses, used round robin; default 127.0.0.1. */
  sourceAddresses?: string[]
}

export interface FloodAnswer {
  status: number
  code: string | null
  retryAfter: string | null
}

export interface FloodResult {
  answers: FloodAnswer[]
  /** Wall-clock bounds of the flood (ms since the epoch), to tell which rate-limit windows it spanned. */
  startedAt: number
  endedAt: number
}

function post(agent: http.Agent, base: URL, body: string, localAddress: string): Promise<FloodAnswer> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: base.hostname,
        port: base.port,
        path: '/api/auth/login',
        method: 'POST',
        agent,
        localAddress,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (chunk: string) => {
          text += chunk
        })
        res.on('end', () => {
          let code: string | null = null
          try {
            code = (JSON.parse(text) as { code?: string }).code ?? null
          } catch {
            code = null
          }
          const retryAfter = res.headers['retry-after']
          resolve({ status: res.statusCode ?? 0, code, retryAfter: retryAfter ?? null })
        })
        res.on('error', reject)
      },
    )
    req.on('error', reject)
    req.end(body)
  })
}

async function flood(options: FloodOptions): Promise<FloodResult> {
  const base = new URL(options.base)
  const sources = options.sourceAddresses ?? ['127.0.0.1']
  const agents = new Map(
    sources.map((address) => [address, new http.Agent({ keepAlive: true, maxSockets: options.concurrency })]),
  )
  const answers: FloodAnswer[] = new Array(options.total)
  let next = 0
  const startedAt = Date.now()
  const lane = async () => {
    for (let i = next++; i < options.total; i = next++) {
      const address = sources[i % sources.length] as string
      const body = JSON.stringify({
        username: options.usernames[i % options.usernames.length],
        password: options.password,
      })
      answers[i] = await post(agents.get(address) as http.Agent, base, body, address)
    }
  }
  try {
    await Promise.all(Array.from({ length: options.concurrency }, lane))
  } finally {
    for (const agent of agents.values()) agent.destroy()
  }
  return { answers, startedAt, endedAt: Date.now() }
}

/** Runs the flood in a worker thread; resolves with every answer once the last one is in. */
export function floodInWorker(options: FloodOptions): Promise<FloodResult> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL(import.meta.url), { workerData: { loginFlood: options } })
    let result: FloodResult | undefined
    worker.once('message', (message: FloodResult) => {
      result = message
    })
    worker.once('error', reject)
    worker.once('exit', (code) => {
      if (result) resolve(result)
      else reject(new Error(`the flood worker exited (${code}) without a result`))
    })
  })
}

// Only in the worker floodInWorker starts (a test runner's own worker threads import this file too).
const request = (workerData as { loginFlood?: FloodOptions } | null)?.loginFlood
if (!isMainThread && parentPort && request) {
  // The worker ends by itself once its agents are destroyed; a rejection fails it with the error.
  parentPort.postMessage(await flood(request))
}
