// Starts dynalite (in memory) on 127.0.0.1:PORT for the tests, with tables
// created and deleted at once, as .ci/run does: node serve.js [PORT].
//
// dynalite 4.0.0 throws from a request's 'error' handler, so a client that
// drops a request mid-body (a reset connection: the torture run's faults,
// a killed gateway) would end the process and every test using it. Such a
// reset is logged and the server keeps running; any other uncaught error
// still ends it.
'use strict'
const dynalite = require('dynalite')

const port = Number(process.argv[2] || 8000)

process.on('uncaughtException', (err) => {
  if (err && (err.code === 'ECONNRESET' || err.message === 'aborted')) {
    console.error('dynalite: a client dropped its request: ' + err.message)
    return
  }
  console.error(err)
  process.exit(1)
})

dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 }).listen(port, '127.0.0.1', (err) => {
  if (err) throw err
  console.log('dynalite listening at http://127.0.0.1:' + port)
})
