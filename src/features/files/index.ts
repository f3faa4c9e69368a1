// The files feature: uploads straight to object storage through pre-signed addresses, confirmed,
// listed and downloaded under /api/storage/files, for any resource type another feature registers.
import type { FastifyInstance } from 'fastify'
import fileRoutes from './routes.ts'

export type { FileRow } from './repository.ts'
export { unfinishedUploadRetention } from './retention.ts'
export { FileRecord, fileLocation, toFileRecord } from './schemas.ts'
export { FileService, stagingKey } from './service.ts'

export default async function filesFeature(app: FastifyInstance) {
  await app.register(fileRoutes, { prefix: '/api/storage/files' })
}
