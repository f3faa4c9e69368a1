// Decorates the instance with the validated configuration and the clock; needs nothing.
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { Clock } from '../clock.ts'
import type { Config } from '../config.ts'

declare module 'fastify' {
  interface FastifyInstance {
    config: Config
    clock: Clock
  }
}

export interface ConfigPluginOptions {
  config: Config
  clock: Clock
}

async function configPlugin(app: FastifyInstance, options: ConfigPluginOptions) {
  app.decorate('config', options.config)
  app.decorate('clock', options.clock)
}

export default fp(configPlugin, { name: 'config', fastify: '5.x' })
