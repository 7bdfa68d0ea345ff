'use strict';
// OpenTinkerClient: submit, inspect, cancel and watch jobs on the Scheduler over gRPC.
//
//   const client = new OpenTinkerClient('127.0.0.1:50051');
//   const job = await client.submitJob({ type: 'RL', ... });
//   for await (const event of client.watchJob(job.job_id)) console.log(event);
//
// Mirrors the Python SDK's SchedulerClient: mutating calls carry a request_id and, like reads,
// are retried on UNAVAILABLE (the server makes the retry idempotent); watchJob resumes after
// the last event it delivered, so a dropped stream loses nothing.

const crypto = require('node:crypto');
const grpc = require('@grpc/grpc-js');
const { loadSchedulerApi } = require('./protos');
const { resolveApiKey, resolveChannelCredentials } = require('./credentials');
const { OpenTinkerError, fromServiceError } = require('./errors');
const { jobSpecFromObject } = require('./spec');
const { messageToJson } = require('./json');

const TERMINAL_STATES = new Set(['STATE_SUCCEEDED', 'STATE_FAILED', 'STATE_CANCELLED']);
const RETRY_DELAYS_MS = Object.freeze([200, 500, 1000, 2000, 4000]);
const JOB = 'opentinker.scheduler.v1.Job';
const JOB_EVENT = 'opentinker.scheduler.v1.JobEvent';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const isRetryable = (error) => error.code === grpc.status.UNAVAILABLE;

function normalizeAddress(url) {
  return url.replace(/^(grpc:\/\/|http:\/\/|dns:\/\/\/)/, '').replace(/\/+$/, '');
}

/** "STATE_SUCCEEDED" -> "SUCCEEDED". */
function stateName(state) {
  return String(state).replace(/^STATE_/, '');
}

class OpenTinkerClient {
  /**
   * @param {string} address  the Scheduler's host:port
   * @param {object} [options]
   * @param {string} [options.apiKey]  else OPENTINKER_API_KEY, OPENTINKER_API_KEY_FILE, .opentinker/admin.key
   * @param {number} [options.timeoutMs]  deadline of each unary call (default 30 s)
   * @param {number[]} [options.retryDelaysMs]  waits between retries on UNAVAILABLE ([] = no retry)
   * @param {string} [options.protoDir]  the repository's protos/ (default: found next to this package)
   * @param {object} [options.tls]  { caFile, certFile, keyFile } of a TLS stack; else OPENTINKER_TLS_CA_FILE
   *   (and _CERT_FILE, _KEY_FILE for mutual TLS) when set; else plaintext
   */
  constructor(address = '127.0.0.1:50051', options = {}) {
    const { apiKey, timeoutMs = 30000, retryDelaysMs = RETRY_DELAYS_MS, protoDir, tls } = options;
    const { SchedulerService, root } = loadSchedulerApi(protoDir);
    this.address = normalizeAddress(address);
    this.root = root;
    this.timeoutMs = timeoutMs;
    this.retryDelaysMs = retryDelaysMs;
    this.apiKey = resolveApiKey(apiKey);
    this.stub = new SchedulerService(this.address, resolveChannelCredentials(grpc, tls), { 'grpc.enable_http_proxy': 0 });
  }

  close() {
    this.stub.close();
  }

  metadata() {
    const metadata = new grpc.Metadata();
    if (this.apiKey) metadata.set('authorization', `Bearer ${this.apiKey}`);
    return metadata;
  }

  callOnce(method, request) {
    return new Promise((resolve, reject) => {
      const deadline = Date.now() + this.timeoutMs;
      this.stub[method](request, this.metadata(), { deadline }, (error, response) => (error ? reject(error) : resolve(response)));
    });
  }

  async call(method, request) {
    for (let attempt = 0; ; attempt += 1) {
      try {
        return await this.callOnce(method, request);
      } catch (error) {
        if (!isRetryable(error) || attempt >= this.retryDelaysMs.length) throw fromServiceError(error);
        await sleep(this.retryDelaysMs[attempt]);
      }
    }
  }

  /** Queue a job (a spec object, enum short names allowed); safe to retry with the same requestId. */
  async submitJob(spec, { requestId, validateOnly = false } = {}) {
    const request = { request_id: requestId || crypto.randomUUID(), spec: jobSpecFromObject(spec, this.root),
                      validate_only: validateOnly };
    return (await this.call('SubmitJob', request)).job;
  }

  async getJob(jobId) {
    return (await this.call('GetJob', { job_id: jobId })).job;
  }

  /** Every job, newest first, across pages; states like ['STATE_RUNNING'] filter them. */
  async listJobs({ states = [], type = 'JOB_TYPE_UNSPECIFIED', pageSize = 50 } = {}) {
    const jobs = [];
    let token = '';
    do {
      const response = await this.call('ListJobs', { page_size: pageSize, page_token: token, states, type });
      jobs.push(...response.jobs);
      token = response.next_page_token;
    } while (token);
    return jobs;
  }

  async cancelJob(jobId, { reason = '', requestId } = {}) {
    const request = { job_id: jobId, request_id: requestId || crypto.randomUUID(), reason };
    return (await this.call('CancelJob', request)).job;
  }

  /** Events in order until the job ends (an async iterator); reconnects after UNAVAILABLE without gaps. */
  async *watchJob(jobId, { afterSequence = 0 } = {}) {
    let last = Number(afterSequence);
    let failures = 0;
    for (;;) {
      const call = this.stub.WatchJob({ job_id: jobId, after_sequence: last }, this.metadata());
      call.on('error', () => {}); // errors reach the loop below; this keeps a late one from crashing
      try {
        for await (const response of call) {
          last = Number(response.event.sequence);
          failures = 0;
          yield response.event;
        }
        return;
      } catch (error) {
        if (!isRetryable(error) || failures >= this.retryDelaysMs.length) throw fromServiceError(error);
        await sleep(this.retryDelaysMs[failures]);
        failures += 1;
      } finally {
        call.cancel();
      }
    }
  }

  /** Wait until the job ends, calling onEvent(event) for each event; resolves to the final job. */
  async wait(jobId, onEvent) {
    for await (const event of this.watchJob(jobId)) if (onEvent) onEvent(event);
    const job = await this.getJob(jobId);
    if (!TERMINAL_STATES.has(job.state)) {
      throw new OpenTinkerError({ code: 'UNKNOWN', details: `event stream of ${jobId} ended while the job is ${stateName(job.state)}` });
    }
    return job;
  }

  /** The proto JSON form of a job (Struct, Timestamp and Duration as JSON values). */
  jobToJson(job) {
    return messageToJson(this.root.lookupType(JOB), job);
  }

  eventToJson(event) {
    return messageToJson(this.root.lookupType(JOB_EVENT), event);
  }
}

module.exports = { OpenTinkerClient, TERMINAL_STATES, RETRY_DELAYS_MS, stateName, normalizeAddress };
