'use strict';
// Errors of API calls: the gRPC status code's name, the server's details, and the
// machine-readable ErrorReason the services put in the trailing metadata `opentinker-reason`.

const grpc = require('@grpc/grpc-js');

const REASON_METADATA_KEY = 'opentinker-reason';
const CODE_NAMES = Object.fromEntries(Object.entries(grpc.status).map(([name, code]) => [code, name]));

class OpenTinkerError extends Error {
  /** code: e.g. "NOT_FOUND"; reason: e.g. "ERROR_REASON_JOB_NOT_FOUND" or "". */
  constructor({ code, details, reason = '' }) {
    super(`${code}: ${details}${reason ? ` (${reason})` : ''}`);
    this.name = 'OpenTinkerError';
    this.code = code;
    this.details = details;
    this.reason = reason;
  }
}

/** A job spec the client rejects before sending it; the message names the field path. */
class SpecError extends Error {
  constructor(message) {
    super(message);
    this.name = 'SpecError';
  }
}

function reasonFromMetadata(metadata) {
  const values = metadata && typeof metadata.get === 'function' ? metadata.get(REASON_METADATA_KEY) : [];
  return values.length ? String(values[0]) : '';
}

/** The OpenTinkerError for a grpc-js ServiceError (a status with code, details, metadata). */
function fromServiceError(error) {
  const code = CODE_NAMES[error.code] || 'UNKNOWN';
  const details = String(error.details || error.message).replace(/\s*Resolution note:\s*$/, '').trim();
  return new OpenTinkerError({ code, details, reason: reasonFromMetadata(error.metadata) });
}

module.exports = { OpenTinkerError, SpecError, fromServiceError, reasonFromMetadata, REASON_METADATA_KEY };
