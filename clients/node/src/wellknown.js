'use strict';
// google.protobuf.Struct / Value / Duration / Timestamp between their JSON forms and the
// object shapes protobufjs encodes (the bundled well-known types use camelCase field names).

const STRUCT = '.google.protobuf.Struct';
const VALUE = '.google.protobuf.Value';
const LIST_VALUE = '.google.protobuf.ListValue';
const DURATION = '.google.protobuf.Duration';
const TIMESTAMP = '.google.protobuf.Timestamp';
const WELL_KNOWN = new Set([STRUCT, VALUE, LIST_VALUE, DURATION, TIMESTAMP]);

function toValue(json) {
  if (json === null || json === undefined) return { nullValue: 'NULL_VALUE' };
  if (typeof json === 'number') return { numberValue: json };
  if (typeof json === 'string') return { stringValue: json };
  if (typeof json === 'boolean') return { boolValue: json };
  if (Array.isArray(json)) return { listValue: { values: json.map(toValue) } };
  return { structValue: toStruct(json) };
}

function toStruct(json) {
  return { fields: Object.fromEntries(Object.entries(json).map(([key, value]) => [key, toValue(value)])) };
}

function fromValue(value) {
  if (!value) return null;
  if (value.structValue) return fromStruct(value.structValue);
  if (value.listValue) return (value.listValue.values || []).map(fromValue);
  for (const kind of ['numberValue', 'stringValue', 'boolValue']) if (kind in value) return value[kind];
  return null;
}

function fromStruct(struct) {
  return Object.fromEntries(Object.entries((struct && struct.fields) || {}).map(([key, value]) => [key, fromValue(value)]));
}

/** "1.5s", 1.5 (seconds) or {seconds, nanos} -> {seconds, nanos}; null when malformed. */
function toDuration(json) {
  if (typeof json === 'object' && json !== null) return json;
  const text = typeof json === 'number' ? String(json) : String(json).replace(/s$/, '');
  const seconds = Number(text);
  if (text === '' || !Number.isFinite(seconds)) return null;
  const whole = Math.trunc(seconds);
  return { seconds: whole, nanos: Math.round((seconds - whole) * 1e9) };
}

function fromDuration(duration) {
  return `${Number(duration.seconds || 0) + Number(duration.nanos || 0) / 1e9}s`;
}

/** ISO 8601 text or {seconds, nanos} -> {seconds, nanos}; null when malformed. */
function toTimestamp(json) {
  if (typeof json === 'object' && json !== null) return json;
  const millis = Date.parse(String(json));
  return Number.isNaN(millis) ? null : { seconds: Math.floor(millis / 1000), nanos: (millis % 1000) * 1e6 };
}

function fromTimestamp(timestamp) {
  const millis = Number(timestamp.seconds || 0) * 1000 + Math.floor(Number(timestamp.nanos || 0) / 1e6);
  return new Date(millis).toISOString();
}

module.exports = {
  STRUCT, VALUE, LIST_VALUE, DURATION, TIMESTAMP, WELL_KNOWN,
  toValue, toStruct, fromValue, fromStruct, toDuration, fromDuration, toTimestamp, fromTimestamp,
};
