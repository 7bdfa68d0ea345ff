'use strict';
// Loads the v1 API from the repository's .proto files at runtime (no generated code):
// @grpc/proto-loader builds the gRPC client constructor, protobufjs the reflection types
// that spec.js and json.js walk.

const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const PROTO_DIR_ENV = 'OPENTINKER_PROTO_DIR';
// clients/node/src -> <repo>/protos
const DEFAULT_PROTO_DIR = path.resolve(__dirname, '..', '..', '..', 'protos');
const SCHEDULER_PROTO = 'opentinker/scheduler/v1/scheduler_service.proto';
const SCHEDULER_SERVICE = 'opentinker.scheduler.v1.SchedulerService';
const LOADER_OPTIONS = Object.freeze({ keepCase: true, enums: String, longs: Number, defaults: true, oneofs: true });

const cache = new Map();

function resolveProtoDir(explicit) {
  return path.resolve(explicit || process.env[PROTO_DIR_ENV] || DEFAULT_PROTO_DIR);
}

function loadReflectionRoot(protoDir) {
  const root = new protobuf.Root();
  // google/protobuf/*.proto are bundled with protobufjs; everything else lives under protoDir.
  root.resolvePath = (_origin, target) => (target.startsWith('google/protobuf/') ? target : path.join(protoDir, target));
  root.loadSync(SCHEDULER_PROTO, { keepCase: true });
  root.resolveAll();
  return root;
}

/** { SchedulerService: grpc client constructor, root: protobufjs Root } for one proto dir (cached). */
function loadSchedulerApi(protoDirOption) {
  const protoDir = resolveProtoDir(protoDirOption);
  if (!cache.has(protoDir)) {
    const definition = protoLoader.loadSync(SCHEDULER_PROTO, { ...LOADER_OPTIONS, includeDirs: [protoDir] });
    const SchedulerService = grpc.makeGenericClientConstructor(definition[SCHEDULER_SERVICE], 'SchedulerService');
    cache.set(protoDir, { SchedulerService, root: loadReflectionRoot(protoDir) });
  }
  return cache.get(protoDir);
}

module.exports = { loadSchedulerApi, resolveProtoDir, PROTO_DIR_ENV, LOADER_OPTIONS };
