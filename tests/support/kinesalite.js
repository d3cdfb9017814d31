// kinesalite (a local Kinesis endpoint, from npm) bound to 127.0.0.1: its CLI ignores --host.
// node tests/support/kinesalite.js PORT   (tests/setup.sh installs the module into tests/.node)
const path = require('path')
const kinesalite = require(path.join(__dirname, '..', '.node', 'node_modules', 'kinesalite'))
const port = parseInt(process.argv[2], 10)
const server = kinesalite({createStreamMs: 50, deleteStreamMs: 50, updateStreamMs: 50, shardLimit: 1000})
server.listen(port, '127.0.0.1', () => console.log('kinesalite listening on 127.0.0.1:' + port))
