'use strict';
// Text the CLI prints for people: one line per job event, one per job, a jobs table.

const { stateName } = require('../client');

const HEADLINE_METRICS = ['reward/mean', 'accuracy', 'eval/accuracy', 'eval/reward/mean', 'loss', 'elo', 'match/win_rate'];
const MAX_METRICS_SHOWN = 5;

const strip = (prefix) => (name) => String(name).replace(prefix, '');
const phaseName = strip(/^PHASE_/);
const levelName = strip(/^LEVEL_/);
const roleName = strip(/^ROLE_/);
const typeName = strip(/^JOB_TYPE_/);

function formatNumber(value) {
  return Number.isInteger(value) ? String(value) : String(Number(value.toPrecision(4)));
}

/** The headline metrics present, then others in name order, at most MAX_METRICS_SHOWN. */
function shownMetrics(values) {
  const names = Object.keys(values);
  const headline = HEADLINE_METRICS.filter((name) => names.includes(name));
  const others = names.filter((name) => !headline.includes(name)).sort();
  return [...headline, ...others].slice(0, MAX_METRICS_SHOWN).map((name) => `${name}=${formatNumber(values[name])}`);
}

const PAYLOAD_LINES = {
  state_changed: ({ from_state, to_state, reason }) =>
    `state ${stateName(from_state)} -> ${stateName(to_state)}${reason ? `: ${reason}` : ''}`,
  metrics: ({ step, agent_id, values }) =>
    [`metrics step ${step}`, agent_id && `agent ${agent_id}`, ...shownMetrics(values)].filter(Boolean).join(' '),
  progress: ({ progress }) => {
    const phase = progress.phase_total ? ` ${progress.phase_done}/${progress.phase_total}` : '';
    return `progress step ${progress.step}/${progress.total_steps} ${phaseName(progress.phase)}${phase}`;
  },
  checkpoint: ({ checkpoint_id, step }) => `checkpoint ${checkpoint_id} step ${step}`,
  log: ({ level, source, message }) => `log ${levelName(level)} [${source}] ${message}`,
  worker_lost: ({ worker_id, role, reason }) => `worker_lost ${worker_id} ${roleName(role)}: ${reason}`,
};

function eventLine(event) {
  const kind = event.payload;
  const describe = PAYLOAD_LINES[kind];
  return `#${event.sequence} ${describe ? describe(event[kind]) : kind || 'event'}`;
}

function jobLine(job) {
  return `job ${job.job_id} ${stateName(job.state)}${job.status_message ? `: ${job.status_message}` : ''}`;
}

function jobsTable(jobs) {
  const rows = [['JOB', 'TYPE', 'STATE', 'STEP', 'MESSAGE'], ...jobs.map((job) => [
    job.job_id, typeName(job.spec ? job.spec.type : ''), stateName(job.state),
    `${job.progress ? job.progress.step : 0}/${job.progress ? job.progress.total_steps : 0}`,
    (job.status_message || '').slice(0, 60)])];
  const widths = rows[0].map((_, column) => Math.max(...rows.map((row) => String(row[column]).length)));
  return rows.map((row) => row.map((cell, column) => String(cell).padEnd(widths[column])).join('  ').trimEnd()).join('\n');
}

module.exports = { eventLine, jobLine, jobsTable, shownMetrics, formatNumber };
