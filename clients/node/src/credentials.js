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

module.exports = { resolveApiKey, API_KEY_ENV, API_KEY_FILE_ENV };
