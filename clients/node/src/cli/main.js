'use strict';
// opentinker-node: submit, run, watch, get, list and cancel jobs from the command line.

const { parseArgs } = require('node:util');
const { OpenTinkerClient } = require('../client');
const { OpenTinkerError, SpecError } = require('../errors');
const { readSpecFile } = require('../spec');
const { EXIT, exitCodeForError } = require('./exit_codes');
const { eventLine, jobLine, jobsTable } = require('./format');

const USAGE = `usage: opentinker-node <command> [options]

commands:
  submit <spec.json>   queue a job, print its id
  run <spec.json>      submit, then watch to the end
  watch <job_id>       print one line per event until the job ends
  get <job_id>         one job
  list                 jobs, newest first
  cancel <job_id>      cancel a job

options:
  --scheduler HOST:PORT  scheduler address (default 127.0.0.1:50051)
  --json                 print JSON (watch: one event per line, then the job)
  --after N              watch: only events after sequence N
  --reason TEXT          cancel: why
  --request-id ID        submit/run: makes a retry safe (the same id returns the same job)
  --no-retry             fail at once when the scheduler is unavailable (default: retry ~8 s)

The API key comes from OPENTINKER_API_KEY, the file named by OPENTINKER_API_KEY_FILE, or
./.opentinker/admin.key. Exit codes: 0 ok / job succeeded, 1 job failed or cancelled (or another
error), 2 bad input (usage, spec, INVALID_ARGUMENT, NOT_FOUND, UNAUTHENTICATED, ...), 3 the
scheduler is unreachable.`;

const OPTIONS = {
  scheduler: { type: 'string', default: '127.0.0.1:50051' },
  json: { type: 'boolean', default: false },
  after: { type: 'string', default: '0' },
  reason: { type: 'string', default: '' },
  'request-id': { type: 'string' },
  'no-retry': { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
};
const ARGUMENT_OF = { submit: 'spec', run: 'spec', watch: 'job_id', get: 'job_id', cancel: 'job_id', list: null };

class UsageError extends Error {}

function parse(argv) {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError(error.message);
  }
  const [command, argument, ...extra] = parsed.positionals;
  if (parsed.values.help) return { help: true };
  if (!(command in ARGUMENT_OF)) throw new UsageError(command ? `unknown command ${command}` : 'no command given');
  const wanted = ARGUMENT_OF[command];
  if (wanted && !argument) throw new UsageError(`${command} needs a ${wanted}`);
  if (extra.length || (!wanted && argument)) throw new UsageError(`unexpected argument ${extra[0] || argument}`);
  if (!/^\d+$/.test(parsed.values.after)) throw new UsageError(`--after must be a sequence number, got ${parsed.values.after}`);
  return { command, argument, options: parsed.values };
}

const print = (text) => process.stdout.write(`${text}\n`);
const printJson = (value) => print(JSON.stringify(value));

async function follow(client, jobId, options) {
  const onEvent = (event) => print(options.json ? JSON.stringify(client.eventToJson(event)) : eventLine(event));
  let job;
  if (Number(options.after) > 0) {
    for await (const event of client.watchJob(jobId, { afterSequence: Number(options.after) })) onEvent(event);
    job = await client.getJob(jobId);
  } else {
    job = await client.wait(jobId, onEvent);
  }
  print(options.json ? JSON.stringify(client.jobToJson(job)) : jobLine(job));
  return job.state === 'STATE_SUCCEEDED' ? EXIT.OK : EXIT.JOB_FAILED;
}

const COMMANDS = {
  async submit(client, spec, options) {
    const job = await client.submitJob(readSpecFile(spec), { requestId: options['request-id'] });
    print(options.json ? JSON.stringify(client.jobToJson(job)) : job.job_id);
    return EXIT.OK;
  },
  async run(client, spec, options) {
    const job = await client.submitJob(readSpecFile(spec), { requestId: options['request-id'] });
    if (!options.json) process.stderr.write(`submitted job ${job.job_id}\n`);
    return follow(client, job.job_id, options);
  },
  watch: (client, jobId, options) => follow(client, jobId, options),
  async get(client, jobId, options) {
    const job = await client.getJob(jobId);
    print(options.json ? JSON.stringify(client.jobToJson(job)) : jobLine(job));
    return EXIT.OK;
  },
  async list(client, _argument, options) {
    const jobs = await client.listJobs();
    print(options.json ? JSON.stringify(jobs.map((job) => client.jobToJson(job))) : jobsTable(jobs));
    return EXIT.OK;
  },
  async cancel(client, jobId, options) {
    const job = await client.cancelJob(jobId, { reason: options.reason });
    print(options.json ? JSON.stringify(client.jobToJson(job)) : jobLine(job));
    return EXIT.OK;
  },
};

function report(error, address) {
  const oneLine = (text) => String(text).replace(/\s*\n\s*/g, ' ');
  if (error instanceof UsageError) {
    process.stderr.write(`error: ${error.message}\n\n${USAGE}\n`);
    return EXIT.BAD_INPUT;
  }
  if (error instanceof SpecError) {
    process.stderr.write(`error: invalid job spec: ${oneLine(error.message)}\n`);
    return EXIT.BAD_INPUT;
  }
  if (error instanceof OpenTinkerError) {
    const code = exitCodeForError(error.code);
    const where = code === EXIT.UNREACHABLE ? `cannot reach the scheduler at ${address}: ` : '';
    process.stderr.write(`error: ${where}${oneLine(error.message)}\n`);
    return code;
  }
  process.stderr.write(`error: ${oneLine(error.message || error)}\n`);
  if (process.env.OPENTINKER_DEBUG) process.stderr.write(`${error.stack}\n`);
  return EXIT.JOB_FAILED;
}

/** Run the CLI on argv (without node and the script); resolves to the exit code. */
async function main(argv) {
  let client;
  let address = OPTIONS.scheduler.default;
  try {
    const { help, command, argument, options } = parse(argv);
    if (help) {
      print(USAGE);
      return EXIT.OK;
    }
    address = options.scheduler;
    client = new OpenTinkerClient(address, options['no-retry'] ? { retryDelaysMs: [] } : {});
    return await COMMANDS[command](client, argument, options);
  } catch (error) {
    return report(error, address);
  } finally {
    if (client) client.close();
  }
}

module.exports = { main, parse, USAGE };
