// Preloaded into a service process (`node --import`, see service-process.ts): crashes it on request
// over the IPC channel, from outside any request, as a bug in a timer or a forgotten promise would.
// 'throw' raises an uncaught exception, 'reject' leaves a rejection unhandled.
process.on('message', (message) => {
  if (message === 'throw') {
    setTimeout(() => {
      throw new Error('boom: uncaught exception')
    })
  } else if (message === 'reject') {
    void Promise.reject(new Error('boom: unhandled rejection'))
  }
})
