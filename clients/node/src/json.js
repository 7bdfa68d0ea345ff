'use strict';
// Decoded messages (proto-loader objects) to their proto JSON form for printing: Struct as a
// plain object, Timestamp as RFC 3339 text, Duration as "1.5s"; field names stay snake_case and
// oneof discriminators (`payload`, `_max_retries`) are left out.

const protobuf = require('protobufjs');
const wk = require('./wellknown');

function wellKnownToJson(type, value) {
  switch (type.fullName) {
    case wk.STRUCT: return wk.fromStruct(value);
    case wk.VALUE: return wk.fromValue(value);
    case wk.LIST_VALUE: return (value.values || []).map(wk.fromValue);
    case wk.DURATION: return wk.fromDuration(value);
    default: return wk.fromTimestamp(value);
  }
}

function valueToJson(field, value) {
  const resolved = field.resolvedType;
  if (resolved instanceof protobuf.Type) return messageToJson(resolved, value);
  return value;
}

function fieldToJson(field, value) {
  if (field.map) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, valueToJson(field, v)]));
  if (field.repeated) return value.map((item) => valueToJson(field, item));
  return valueToJson(field, value);
}

/** The JSON form of a decoded message of protobufjs type `type`. */
function messageToJson(type, message) {
  if (wk.WELL_KNOWN.has(type.fullName)) return wellKnownToJson(type, message);
  const json = {};
  for (const field of type.fieldsArray) {
    const value = message[field.name];
    if (value !== undefined && value !== null) json[field.name] = fieldToJson(field, value);
  }
  return json;
}

module.exports = { messageToJson };
