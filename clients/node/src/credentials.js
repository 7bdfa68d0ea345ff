'use strict';
// Where a client finds its API key (the same order as the Python SDK's credentials.py):
//   the explicit key  or  $OPENTINKER_API_KEY  or  the file named by $OPENTINKER_API_KEY_FILE
//   or  .opentinker/admin.key (the key `opentinker up` made in this directory)  or  "" (no key).
// Keys come from the environment or files, never from command-line arguments (visible in `ps`).

const fs = require('node:fs');
const path = require('node:path');

const API_KEY_ENV = 'OPENTINKER_API_KEY';
const API_KEY_FILE_ENV = 'OPENTINKER_API_KEY_FILE';
const LOCAL_ADMIN_KEY = path.join('.opentinker', 'admin.key');

function resolveApiKey(explicit) {
  if (explicit) return explicit.trim();
  if (process.env[API_KEY_ENV]) return process.env[API_KEY_ENV].trim();
  if (process.env[API_KEY_FILE_ENV]) return fs.readFileSync(process.env[API_KEY_FILE_ENV], 'utf8').trim();
  return fs.existsSync(LOCAL_ADMIN_KEY) ? fs.readFileSync(LOCAL_ADMIN_KEY, 'utf8').trim() : '';
}

// TLS (a stack run with OPENTINKER_TLS=on or mutual): the stack's CA, and for mutual TLS this
// client's certificate and key, from the explicit options or the same variables the Python SDK
// reads. No CA: plaintext.
const TLS_CA_ENV = 'OPENTINKER_TLS_CA_FILE';
const TLS_CERT_ENV = 'OPENTINKER_TLS_CERT_FILE';
const TLS_KEY_ENV = 'OPENTINKER_TLS_KEY_FILE';

/** grpc-js channel credentials: TLS with `tls` ({ caFile, certFile, keyFile }) or the environment's, else insecure. */
function resolveChannelCredentials(grpc, tls) {
  const files = tls || (process.env[TLS_CA_ENV]
    ? { caFile: process.env[TLS_CA_ENV], certFile: process.env[TLS_CERT_ENV], keyFile: process.env[TLS_KEY_ENV] }
    : null);
  if (!files || !files.caFile) return grpc.credentials.createInsecure();
  if (Boolean(files.certFile) !== Boolean(files.keyFile)) {
    throw new Error(`a client certificate needs its key and a key its certificate: set both certFile and keyFile (${TLS_CERT_ENV}, ${TLS_KEY_ENV}) or neither`);
  }
  const read = (file) => (file ? fs.readFileSync(file) : null);
  return grpc.credentials.createSsl(read(files.caFile), read(files.keyFile), read(files.certFile));
}

module.exports = { resolveApiKey, resolveChannelCredentials, API_KEY_ENV, API_KEY_FILE_ENV, TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV };
