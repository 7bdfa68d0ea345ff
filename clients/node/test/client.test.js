'use strict';
// The client against a scripted SchedulerService on a real socket: behaviour a live stack does
// not show on demand (a stream dropped with UNAVAILABLE, a unary call failing once). The live
// end-to-end checks are in tests/client/test_node_client.py.

const test = require('node:test');
const assert = require('node:assert/strict');
const grpc = require('@grpc/grpc-js');
const { OpenTinkerClient, SpecError, jobSpecFromObject } = require('../src');
const { loadSchedulerApi } = require('../src/protos');

const { SchedulerService, root } = loadSchedulerApi();
const unavailable = { code: grpc.status.UNAVAILABLE, details: 'scheduler restarting' };
const event = (sequence, payload) => ({ job_id: 'job-1', sequence, ...payload });
const job = (state) => ({ job_id: 'job-1', state });

/** A SchedulerService whose handlers the test supplies; resolves to { address, close }. */
function serve(handlers) {
  const server = new grpc.Server();
  server.addService(SchedulerService.service, handlers);
  return new Promise((resolve, reject) => {
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, port) => {
      if (error) reject(error);
      else resolve({ address: `127.0.0.1:${port}`, close: () => server.forceShutdown() });
    });
  });
}

test('watchJob resumes after UNAVAILABLE from the last delivered sequence', async () => {
  const requests = [];
  const server = await serve({
    WatchJob(call) {
      requests.push({ after: Number(call.request.after_sequence), auth: call.metadata.get('authorization')[0] });
      if (requests.length === 1) {
        call.write({ event: event(1, { metrics: { step: 1, values: { loss: 0.5 } } }) });
        call.write({ event: event(2, { metrics: { step: 2, values: { loss: 0.25 } } }) });
        setTimeout(() => call.emit('error', unavailable), 20);
      } else {
        call.write({ event: event(3, { state_changed: { from_state: 'STATE_RUNNING', to_state: 'STATE_SUCCEEDED' } }) });
        call.end();
      }
    },
    GetJob: (_call, callback) => callback(null, { job: job('STATE_SUCCEEDED') }),
  });
  const client = new OpenTinkerClient(server.address, { apiKey: 'test-key', retryDelaysMs: [10] });
  try {
    const seen = [];
    const final = await client.wait('job-1', (e) => seen.push([Number(e.sequence), e.payload]));
    assert.deepEqual(seen, [[1, 'metrics'], [2, 'metrics'], [3, 'state_changed']]);
    assert.deepEqual(requests, [{ after: 0, auth: 'Bearer test-key' }, { after: 2, auth: 'Bearer test-key' }]);
    assert.equal(final.state, 'STATE_SUCCEEDED');
  } finally {
    client.close();
    server.close();
  }
});

test('a retried SubmitJob repeats its request_id, and errors carry code and reason', async () => {
  const submitted = [];
  const server = await serve({
    SubmitJob(call, callback) {
      submitted.push(call.request);
      if (submitted.length === 1) callback(unavailable);
      else callback(null, { job: job('STATE_QUEUED'), created: true });
    },
    GetJob(_call, callback) {
      const trailers = new grpc.Metadata();
      trailers.set('opentinker-reason', 'ERROR_REASON_JOB_NOT_FOUND');
      callback({ code: grpc.status.NOT_FOUND, details: 'job job-2 not found', metadata: trailers });
    },
  });
  const client = new OpenTinkerClient(server.address, { apiKey: 'k', retryDelaysMs: [10] });
  try {
    const queued = await client.submitJob({ type: 'RL', environment: { env_name: 'math', config: { seed: 3 } } });
    assert.equal(queued.state, 'STATE_QUEUED');
    assert.equal(submitted.length, 2);
    assert.match(submitted[0].request_id, /^[0-9a-f-]{36}$/);
    assert.equal(submitted[1].request_id, submitted[0].request_id);
    assert.equal(submitted[1].spec.type, 'JOB_TYPE_RL');
    assert.deepEqual(submitted[1].spec.environment.config.fields.seed.numberValue, 3);
    await assert.rejects(client.getJob('job-2'), { code: 'NOT_FOUND', reason: 'ERROR_REASON_JOB_NOT_FOUND',
                                                  details: 'job job-2 not found' });
  } finally {
    client.close();
    server.close();
  }
});

test('specs expand enum short names and name the path of a bad field', () => {
  const spec = jobSpecFromObject({ type: 'sft', policy: { algorithm: { loss: { function: 'PPO_CLIP' } } },
                                   training: { totalSteps: 3, max_duration: '90s' } }, root);
  assert.equal(spec.type, 'JOB_TYPE_SFT');
  assert.equal(spec.policy.algorithm.loss.function, 'LOSS_FUNCTION_PPO_CLIP');
  assert.deepEqual(spec.training, { total_steps: 3, max_duration: { seconds: 90, nanos: 0 } });
  assert.throws(() => jobSpecFromObject({ training: { group_sise: 2 } }, root),
                (error) => error instanceof SpecError && /^spec\.training\.group_sise: unknown field/.test(error.message));
  assert.throws(() => jobSpecFromObject({ training: { batch_size: 'eight' } }, root),
                /spec\.training\.batch_size: expected an integer/);
  assert.throws(() => jobSpecFromObject({ type: 'RLX' }, root), /spec\.type: "RLX" is not one of RL, SFT, INFERENCE, SESSION$/);
});

test('over mutual TLS the client presents its certificate; without TLS or a certificate it gets nowhere', async (t) => {
  const { execFileSync } = require('node:child_process');
  const fs = require('node:fs');
  const os = require('node:os');
  const path = require('node:path');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ot-node-tls-'));
  const openssl = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  try {
    openssl('version');
  } catch {
    t.skip('needs the openssl command');
    return;
  }
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  openssl('req', '-x509', ...ec, '-days', '1', '-subj', '/CN=test CA', '-keyout', 'ca.key', '-out', 'ca.pem');
  fs.writeFileSync(path.join(dir, 'ext'), 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n');
  for (const name of ['server', 'client']) {
    openssl('req', ...ec, '-subj', `/CN=${name}`, '-keyout', `${name}.key`, '-out', `${name}.csr`);
    openssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '1',
      '-extfile', 'ext', '-out', `${name}.pem`);
  }
  const file = (name) => fs.readFileSync(path.join(dir, name));
  const server = new grpc.Server();
  server.addService(SchedulerService.service, { GetJob: (_call, callback) => callback(null, { job: job('STATE_RUNNING') }) });
  const credentials = grpc.ServerCredentials.createSsl(file('ca.pem'), [{ private_key: file('server.key'), cert_chain: file('server.pem') }], true);
  const port = await new Promise((resolve, reject) => server.bindAsync('127.0.0.1:0', credentials, (e, p) => (e ? reject(e) : resolve(p))));
  const address = `127.0.0.1:${port}`;
  const tls = { caFile: path.join(dir, 'ca.pem'), certFile: path.join(dir, 'client.pem'), keyFile: path.join(dir, 'client.key') };
  const clients = [];
  const client = (options) => { const c = new OpenTinkerClient(address, { retryDelaysMs: [], timeoutMs: 3000, ...options }); clients.push(c); return c; };
  try {
    assert.equal((await client({ tls }).getJob('job-1')).state, 'STATE_RUNNING');
    await assert.rejects(client({}).getJob('job-1'), (error) => error.code === 'UNAVAILABLE');
    await assert.rejects(client({ tls: { caFile: tls.caFile } }).getJob('job-1'), (error) => error.code === 'UNAVAILABLE');
    assert.throws(() => client({ tls: { caFile: tls.caFile, certFile: tls.certFile } }), /needs its key/);
  } finally {
    for (const c of clients) c.close();
    server.forceShutdown();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
