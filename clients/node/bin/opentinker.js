#!/usr/bin/env node
'use strict';
// The OpenTinker Node.js CLI; see `opentinker-node --help` and ../README.md.

const { main } = require('../src/cli/main');

// `opentinker-node list | head -1` closes stdout early: stop quietly, as other CLIs do.
process.stdout.on('error', (error) => {
  if (error.code === 'EPIPE') process.exit(0);
  throw error;
});

main(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
});
