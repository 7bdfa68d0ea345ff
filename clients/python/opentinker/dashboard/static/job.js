// One job's page: state, progress, details, live metric charts, its completions and artifacts
// (results.js), recent events, Cancel with a confirmation dialog. The history comes from /metrics, then live events from /events.

import {ApiError, EventFeed, api, reportError, showNotice} from "./api.js";
import {drawChart} from "./chart.js";
import {el, fmt, fmtTime, mount, progressBar, stateBadge} from "./dom.js";
import {ArtifactsList, CompletionsTable} from "./results.js";

export const DEFAULT_METRIC = "reward/mean";
const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);
const RECENT_EVENTS = 40;
// The small panels side by side: per panel, the first of its metrics the job reports.
const PANELS = [["reward/mean", "eval/reward/mean"], ["accuracy", "eval/accuracy", "match/win_rate"],
  ["loss"], ["kl", "kl_reward/kl"], ["truncated", "eval/truncated"]];
const PANEL_SIZE = {width: 400, height: 220, id: "", testid: "metric-panel-chart"};

function notFoundView(what, message) {
  mount("not-found", el("section", {id: "not-found", "data-testid": "not-found", class: "panel"},
    el("h2", {text: "404: not found"}), el("p", {text: `${what} does not exist, or your key cannot see it.`}),
    el("p", {class: "muted", text: message}),
    el("a", {href: "/jobs", "data-nav": true, text: "Back to the jobs"})));
}

export function jobView(jobId) {
  const page = new JobPage(jobId);
  page.load();
  return page;
}

class JobPage {
  constructor(jobId) {
    this.jobId = jobId;
    this.series = {};
    this.metric = DEFAULT_METRIC;
    this.chosenMetric = null;
    this.feed = null;
  }

  stop() {
    if (this.feed) this.feed.stop();
    this.stopped = true;
  }

  async load() {
    const path = `/api/jobs/${encodeURIComponent(this.jobId)}`;
    try {
      const [{job}, metrics] = await Promise.all([api(path), api(`${path}/metrics`)]);
      if (this.stopped) return;
      showNotice("");
      this.series = metrics.series;
      this.render(job);
      // the stream starts RECENT_EVENTS back, so the log shows what happened last (a finished
      // job's too); replayed metrics and progress land where they already are
      const from = Math.max(0, (metrics.last_sequence || 0) - RECENT_EVENTS);
      this.feed = new EventFeed(`${path}/events`, from, {
        job: ({job: fresh}) => this.renderJob(fresh),
        message: (event) => this.onEvent(event),
        end: ({job: final}) => { this.renderJob(final); this.setStream("ended"); },
        failure: (error) => { this.setStream("failed"); reportError(error); },
        status: (status) => this.setStream(status),
      });
      this.feed.run();
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) notFoundView(`Job ${this.jobId}`, error.message);
      else reportError(error);
    }
  }

  render(job) {
    this.header = el("div", {class: "job-header"});
    this.details = el("dl", {id: "job-details", class: "details"});
    this.select = el("select", {id: "metric-select", "data-testid": "metric-select",
      onchange: () => { this.chosenMetric = this.metric = this.select.value; this.drawChart(); }});
    this.chart = el("div", {id: "chart-container"});
    this.latest = el("span", {id: "metric-latest", class: "number"});
    this.panels = el("div", {id: "metric-panels", class: "metric-panels"});
    this.log = el("ol", {id: "event-log", class: "event-log"});
    this.completions = new CompletionsTable(this.jobId);
    this.artifacts = new ArtifactsList(this.jobId);
    this.cancelButton = el("button", {id: "cancel-button", "data-testid": "cancel-button", class: "danger",
      text: "Cancel job…", onclick: () => this.askCancel()});
    mount("job",
      el("p", {}, el("a", {href: "/jobs", "data-nav": true, text: "← Jobs"})),
      this.header,
      el("div", {class: "toolbar"}, this.cancelButton,
        el("span", {class: "muted"}, "stream: ", el("span", {id: "stream-status", text: "connecting"}))),
      this.details,
      this.panels,
      el("section", {class: "panel"},
        el("div", {class: "chart-title"}, el("label", {for: "metric-select", text: "Metric "}), this.select,
          el("span", {class: "muted"}, " latest: ", this.latest)),
        this.chart),
      this.completions.node,
      this.artifacts.node,
      el("section", {class: "panel"}, el("h3", {text: "Recent events"}), this.log));
    this.completions.load();
    this.artifacts.load();
    this.renderJob(job);
    this.fillMetricList();
    this.drawChart();
  }

  renderJob(job) {
    this.job = job;
    const {step, total_steps: total, phase} = job.progress;
    const state = job.cancel_requested && !TERMINAL.has(job.state) ? `${job.state} (cancelling)` : job.state;
    this.header.replaceChildren(
      el("h2", {id: "job-title"}, job.display_name || job.job_id, " ", stateBadge(job.state, "job-state")),
      el("div", {class: "progress-line"}, progressBar(step, total, "job-progress"),
        el("span", {id: "job-step", "data-step": step, text: `step ${step} / ${total}`}),
        el("span", {class: "muted", id: "job-phase", text: phase})));
    const rows = [["Job id", job.job_id], ["Type", job.type], ["State", state], ["Tenant", job.tenant_id],
      ["Created", fmtTime(job.create_time)], ["Started", fmtTime(job.start_time)],
      ["Ended", fmtTime(job.end_time)], ["Attempt", job.attempt], ["Message", job.status_message || "–"],
      ["Workers", job.assignments.map((a) => `${a.role} ${a.worker_id} [${a.device_ids.join(", ")}]`)
        .join("; ") || "–"]];
    this.details.replaceChildren(...rows.flatMap(([term, value]) => [el("dt", {text: term}),
      el("dd", {text: value})]));
    this.cancelButton.disabled = TERMINAL.has(job.state) || job.cancel_requested;
  }

  onEvent(event) {
    this.addToLog(event);
    if (event.kind === "metrics") this.addMetrics(event.metrics);
    if (event.kind === "samples") this.completions.onSamples();
    if (event.kind === "checkpoint") this.artifacts.load();
    if (event.kind === "metrics") this.artifacts.onMetrics();
    if (event.kind === "progress") this.renderJob({...this.job, progress: event.progress});
    if (event.kind === "state_changed") {
      const to = event.state_changed.to_state;
      const message = event.state_changed.reason || this.job.status_message;
      this.renderJob({...this.job, state: to, status_message: message});
      if (TERMINAL.has(to)) this.artifacts.load();
    }
  }

  addMetrics({step, agent_id: agent, values}) {
    for (const [metric, value] of Object.entries(values)) {
      const name = agent ? `${agent}/${metric}` : metric;
      const points = (this.series[name] ||= []);
      const index = points.findIndex(([s]) => s === step);
      if (index >= 0) points[index] = [step, value];
      else points.push([step, value]);
      points.sort((a, b) => a[0] - b[0]);
    }
    this.fillMetricList();
    this.drawChart();
  }

  // The metric shown: the user's choice, else reward/mean, else loss (SFT), else the first one.
  preferredMetric(names) {
    if (this.chosenMetric) return this.chosenMetric;
    return [DEFAULT_METRIC, "loss"].find((name) => names.includes(name)) || names[0] || DEFAULT_METRIC;
  }

  fillMetricList() {
    const names = Object.keys(this.series).sort();
    this.metric = this.preferredMetric(names);
    const wanted = names.includes(this.metric) ? names : [this.metric, ...names];
    if (wanted.join("\n") === [...this.select.options].map((o) => o.value).join("\n")) return;
    this.select.replaceChildren(...wanted.map((name) => el("option", {value: name, text: name})));
    this.select.value = this.metric;
  }

  drawPanels() {
    const shown = PANELS.map((names) => names.find((name) => this.series[name]?.length)).filter(Boolean);
    this.panels.replaceChildren(...shown.map((name) => {
      const points = this.series[name];
      const plot = el("div", {class: "panel-chart"});
      drawChart(plot, name, points, PANEL_SIZE);
      return el("figure", {class: "panel metric-panel", "data-testid": "metric-panel", "data-metric": name},
        el("figcaption", {}, el("strong", {text: name}), " ",
          el("span", {class: "muted number", text: `latest ${fmt(points[points.length - 1][1])}`})), plot);
    }));
  }

  drawChart() {
    this.drawPanels();
    const points = this.series[this.metric] || [];
    drawChart(this.chart, this.metric, points);
    this.latest.textContent = points.length ? fmt(points[points.length - 1][1]) : "–";
  }

  addToLog(event) {
    const summary = {
      state_changed: (e) => `state ${e.from_state} → ${e.to_state}${e.reason ? `: ${e.reason}` : ""}`,
      metrics: (e) => `step ${e.step} metrics` +
        (e.values[DEFAULT_METRIC] !== undefined ? `, reward ${fmt(e.values[DEFAULT_METRIC])}` : ""),
      progress: (e) => `progress ${e.phase} step ${e.step}/${e.total_steps}`,
      log: (e) => `${e.level} ${e.source}: ${e.message}`,
      checkpoint: (e) => `checkpoint ${e.checkpoint_id} (step ${e.step})`,
      worker_lost: (e) => `worker lost: ${e.worker_id} (${e.reason})`,
      samples: (e) => `step ${e.step} ${e.split}: ${e.samples.length} samples`,
    }[event.kind];
    if (!summary) return;
    this.log.prepend(el("li", {"data-kind": event.kind},
      el("span", {class: "muted", text: `#${event.sequence} `}), summary(event[event.kind])));
    while (this.log.children.length > RECENT_EVENTS) this.log.lastChild.remove();
  }

  setStream(status) {
    const node = document.getElementById("stream-status");
    if (node) { node.textContent = status; node.dataset.status = status; }
  }

  askCancel() {
    const dialog = document.getElementById("cancel-dialog");
    document.getElementById("cancel-dialog-job").textContent = this.jobId;
    dialog.returnValue = "";
    dialog.onclose = () => { if (dialog.returnValue === "confirm") this.cancel(); };
    dialog.showModal();
  }

  async cancel() {
    try {
      const {job} = await api(`/api/jobs/${encodeURIComponent(this.jobId)}/cancel`, {
        method: "POST", body: JSON.stringify({reason: "cancelled from the dashboard"})});
      this.renderJob(job);
    } catch (error) {
      reportError(error);
    }
  }
}
