'use strict';
// Job specs from plain objects (parsed JSON), with enum short names (`type: "RL"`,
// `function: "PPO_CLIP"`) like the Python SDK's spec.py. Field names follow the proto
// (snake_case; lowerCamelCase is accepted too). An unknown field or a value of the wrong kind
// throws SpecError naming its path, e.g. `spec.training.group_sise: unknown field`, because
// protobufjs would otherwise drop it silently.

const fs = require('node:fs');
const protobuf = require('protobufjs');
const { SpecError } = require('./errors');
const wk = require('./wellknown');

const JOB_SPEC = 'opentinker.scheduler.v1.JobSpec';
const INTEGER_TYPES = new Set(['int32', 'uint32', 'sint32', 'fixed32', 'sfixed32']);
const LONG_TYPES = new Set(['int64', 'uint64', 'sint64', 'fixed64', 'sfixed64']);
const FLOAT_TYPES = new Set(['double', 'float']);

const isMapping = (value) => typeof value === 'object' && value !== null && !Array.isArray(value);
const camelToSnake = (name) => name.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);

function expandEnum(enumType, value, path) {
  const names = Object.keys(enumType.values);
  if (typeof value === 'number' && Object.values(enumType.values).includes(value)) return value;
  if (typeof value !== 'string') throw new SpecError(`${path}: expected an enum name, got ${JSON.stringify(value)}`);
  if (names.includes(value)) return value;
  const prefix = names[0].replace(/UNSPECIFIED$/, '');
  if (names.includes(prefix + value.toUpperCase())) return prefix + value.toUpperCase();
  const allowed = names.filter((n) => !n.endsWith('UNSPECIFIED')).map((n) => n.slice(prefix.length));
  throw new SpecError(`${path}: ${JSON.stringify(value)} is not one of ${allowed.join(', ')}`);
}

function checkScalar(type, value, path) {
  const fail = (kind) => { throw new SpecError(`${path}: expected ${kind}, got ${JSON.stringify(value)}`); };
  if (type === 'string' || type === 'bytes') return typeof value === 'string' ? value : fail('a string');
  if (type === 'bool') return typeof value === 'boolean' ? value : fail('true or false');
  if (FLOAT_TYPES.has(type)) return typeof value === 'number' ? value : fail('a number');
  const integer = typeof value === 'number' ? value : LONG_TYPES.has(type) && /^-?\d+$/.test(value) ? Number(value) : NaN;
  if (!Number.isInteger(integer)) fail('an integer');
  if (INTEGER_TYPES.has(type) && Math.abs(integer) >= 2 ** 32) fail('a 32-bit integer');
  return value;
}

function expandWellKnown(type, value, path) {
  const name = type.fullName;
  if (name === wk.STRUCT) return isMapping(value) ? wk.toStruct(value) : fail(path, 'a mapping', value);
  if (name === wk.VALUE) return wk.toValue(value);
  if (name === wk.LIST_VALUE) return Array.isArray(value) ? { values: value.map(wk.toValue) } : fail(path, 'a list', value);
  const converted = name === wk.DURATION ? wk.toDuration(value) : wk.toTimestamp(value);
  return converted || fail(path, name === wk.DURATION ? 'a duration like "30s"' : 'an RFC 3339 time', value);
}

function fail(path, kind, value) {
  throw new SpecError(`${path}: expected ${kind}, got ${JSON.stringify(value)}`);
}

function expandOne(field, value, path) {
  const resolved = field.resolvedType;
  if (resolved instanceof protobuf.Enum) return expandEnum(resolved, value, path);
  if (resolved instanceof protobuf.Type) return expandMessage(resolved, value, path);
  return checkScalar(field.type, value, path);
}

function expandField(field, value, path) {
  if (field.map) {
    if (!isMapping(value)) fail(path, 'a mapping', value);
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, expandOne(field, v, `${path}[${JSON.stringify(k)}]`)]));
  }
  if (field.repeated) {
    if (!Array.isArray(value)) fail(path, 'a list', value);
    return value.map((item, index) => expandOne(field, item, `${path}[${index}]`));
  }
  return expandOne(field, value, path);
}

function expandMessage(type, data, path) {
  if (wk.WELL_KNOWN.has(type.fullName)) return expandWellKnown(type, data, path);
  if (data === null || data === undefined) return {};
  if (!isMapping(data)) fail(path, 'a mapping', data);
  const expanded = {};
  for (const [key, value] of Object.entries(data)) {
    const field = type.fields[key] || type.fields[camelToSnake(key)];
    if (!field) {
      const known = Object.keys(type.fields).sort().join(', ');
      throw new SpecError(`${path}.${key}: unknown field (known: ${known})`);
    }
    if (value !== null && value !== undefined) expanded[field.name] = expandField(field, value, `${path}.${key}`);
  }
  return expanded;
}

/** A JobSpec object ready for the wire, from a plain object; throws SpecError naming the field. */
function jobSpecFromObject(data, root) {
  const spec = isMapping(data) && isMapping(data.spec) ? data.spec : data;
  return expandMessage(root.lookupType(JOB_SPEC), spec, 'spec');
}

/** The plain object in a JSON spec file (a `spec:` wrapper is unwrapped by jobSpecFromObject). */
function readSpecFile(file) {
  let text;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    throw new SpecError(`cannot read ${file}: ${error.code || error.message}`);
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    const hint = /\.ya?ml$/i.test(file) ? ' (this client reads JSON specs; convert the YAML to JSON)' : '';
    throw new SpecError(`${file} is not valid JSON: ${error.message}${hint}`);
  }
}

module.exports = { jobSpecFromObject, readSpecFile, JOB_SPEC };
