// Decorates `app.housekeeping`: the retention rules of the tables that grow with traffic, run by
// one periodic worker in small batches (and on demand by the CLI and tests), with a metric of the
// rows each rule removed; needs db, metrics and storage (unconfirmed uploads' objects).
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { Counter } from 'prom-client'
import type { Config } from '../config.ts'
import type { ObjectStore } from '../storage/port.ts'
import { Housekeeping, type RetentionRule } from './runner.ts'

declare module 'fastify' {
  interface FastifyInstance {
    housekeeping: Housekeeping
  }
}

export interface HousekeepingPluginOptions {
  /** false: no periodic runs (CLI; tests call `app.housekeeping.runOnce()`). */
  start?: boolean
  /** The retention rules to run, built from the configuration and the object store. */
  rules: (config: Config, deps: { store: ObjectStore }) => RetentionRule[]
}

async function housekeepingPlugin(app: FastifyInstance, options: HousekeepingPluginOptions) {
  const removed = new Counter({
    name: 'housekeeping_rows_removed_total',
    help: 'Rows removed by each retention rule',
    labelNames: ['rule'] as const,
    registers: [app.metrics],
  })
  const housekeeping = new Housekeeping({
    onRemoved: (rule, count) => removed.inc({ rule }, count),
    db: app.db,
    clock: app.clock,
    log: app.log,
    rules: options.rules(app.config, { store: app.storage }),
  })
  app.decorate('housekeeping', housekeeping)
  if (options.start ?? true) app.addHook('onReady', async () => housekeeping.start())
  app.addHook('onClose', () => housekeeping.stop())
}

export default fp(housekeepingPlugin, {
  name: 'housekeeping',
  fastify: '5.x',
  dependencies: ['config', 'db', 'storage'],
})
