import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    setupFiles: ['test/helpers/contract-setup.ts'],
    testTimeout: 20_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // expect.poll waits for a behaviour (a screen shown, a change seen by another instance), never
    // bounds how fast it comes: two shared cores running parallel files (Chromium among them) need
    // more than the default second.
    expect: { poll: { timeout: 10_000 } },
  },
})
