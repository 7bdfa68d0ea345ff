// What a job gives back, on its page: a table of the episodes it showed as samples (prompt, reply,
// reward, stop reason, verdict; one step at a time, the latest by default) and its artifacts with
// the command that downloads each.

import {ApiError, api, authHeaders, reportError} from "./api.js";
import {el, fmt, headerRow} from "./dom.js";

const REPLY_CHARS = 400;

function clip(text, limit = REPLY_CHARS) {
  return text.length <= limit ? text : `${text.slice(0, limit)}…`;
}

function verdict(correct) {
  if (correct === null || correct === undefined) return "–";
  return correct ? "correct" : "wrong";
}

function replyCell(turns) {
  return el("td", {class: "reply"}, turns.map((turn, index) => el("div", {class: "turn"},
    turns.length > 1 ? el("span", {class: "muted", text: `${index + 1}. `}) : null,
    el("code", {text: clip(turn.action) || "(empty)"}),
    turn.truncated ? el("span", {class: "muted", text: " (cut off)"}) : null,
    turn.observation ? el("div", {class: "muted observation", text: `→ ${clip(turn.observation, 160)}`}) : null)));
}

export class CompletionsTable {
  constructor(jobId) {
    this.path = `/api/jobs/${encodeURIComponent(jobId)}/samples`;
    this.step = null;  // null: follow the latest step
    this.select = el("select", {id: "samples-step", "data-testid": "samples-step",
      onchange: () => { this.step = this.select.value === "" ? null : Number(this.select.value); this.load(); }});
    this.body = el("tbody", {});
    this.empty = el("p", {class: "muted", id: "samples-empty", text: "No samples yet: each step shows a few episodes."});
    this.node = el("section", {class: "panel", id: "samples", "data-testid": "samples"},
      el("div", {class: "chart-title"}, el("h3", {text: "Completions"}), " ",
        el("label", {for: "samples-step", text: "Step "}), this.select),
      this.empty,
      el("table", {id: "samples-table", "data-testid": "samples-table"},
        headerRow("Step", "Split", "Prompt", "Reply", "Reward", "Stop", "Verdict"), this.body));
  }

  async load() {
    try {
      const query = this.step === null ? "" : `?step=${this.step}`;
      this.render(await api(`${this.path}${query}`));
    } catch (error) {
      reportError(error);
    }
  }

  render({steps, samples}) {
    const options = [el("option", {value: "", text: "latest"}),
      ...steps.map((step) => el("option", {value: step, text: String(step)}))];
    this.select.replaceChildren(...options);
    this.select.value = this.step === null ? "" : String(this.step);
    const rows = samples.flatMap((report) => report.samples.map((sample) => el("tr", {
      "data-testid": "sample-row", "data-split": report.split, "data-step": report.step},
      el("td", {class: "number", text: report.step}),
      el("td", {text: report.agent_id ? `${report.split} (${report.agent_id})` : report.split}),
      el("td", {class: "prompt"}, el("code", {text: clip(sample.prompt, 240)})),
      replyCell(sample.turns),
      el("td", {class: "number", text: fmt(sample.reward)}),
      el("td", {text: sample.stop_reason}),
      el("td", {"data-testid": "sample-verdict", text: verdict(sample.correct)}))));
    this.body.replaceChildren(...rows);
    this.empty.hidden = rows.length > 0;
  }

  // A new step's samples arrived: show them when following the latest step.
  onSamples() {
    if (this.step === null) this.load();
  }
}

export class ArtifactsList {
  constructor(jobId) {
    this.path = `/api/jobs/${encodeURIComponent(jobId)}/artifacts`;
    this.body = el("tbody", {});
    this.empty = el("p", {class: "muted", text: "No artifacts yet: checkpoints and outputs appear as the job saves them."});
    this.node = el("section", {class: "panel", id: "artifacts", "data-testid": "artifacts"},
      el("h3", {text: "Artifacts"}), this.empty,
      el("table", {id: "artifacts-table"}, headerRow("Artifact", "Kind", "Format", "Step", "Size", "Download"),
        this.body));
  }

  // The first metrics make metrics.jsonl an artifact: list again while the list is still empty.
  onMetrics() {
    if (!this.body.children.length && !this.loading) this.load();
  }

  async load() {
    this.loading = true;
    try {
      const {artifacts} = await api(this.path);
      this.body.replaceChildren(...artifacts.map((a) => el("tr", {"data-testid": "artifact-row"},
        el("td", {}, el("code", {text: a.artifact_id})), el("td", {text: a.kind}), el("td", {text: a.format}),
        el("td", {class: "number", text: a.kind === "CHECKPOINT" ? a.step : "–"}),
        el("td", {class: "number", text: size(a.size_bytes)}),
        el("td", {}, downloadLink(a), el("div", {}, el("code", {class: "muted", text: downloadCommand(a)}))))));
      this.empty.hidden = artifacts.length > 0;
    } catch (error) {
      reportError(error);
    } finally {
      this.loading = false;
    }
  }
}

// A link to the dashboard's download (a tar of the loadable directory, or the one file); with a
// pasted key the file is fetched with it and handed to the browser as a blob.
function downloadLink(artifact) {
  const dir = artifact.loadable_dirs[0];
  const href = `/api/artifacts/download?id=${encodeURIComponent(artifact.artifact_id)}` +
    (dir ? `&path=${encodeURIComponent(dir)}` : "");
  return el("a", {href, download: "", "data-testid": "artifact-download", text: dir ? `${dir}/ (tar)` : "file",
    onclick: (event) => {
      if (!authHeaders().Authorization) return;  // the dashboard's own key: a plain link
      event.preventDefault();
      fetchAsFile(href).catch(reportError);
    }});
}

async function fetchAsFile(href) {
  const response = await fetch(href, {headers: authHeaders()});
  if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => ({})));
  const name = /filename="([^"]+)"/.exec(response.headers.get("Content-Disposition") || "")?.[1] || "artifact";
  const url = URL.createObjectURL(await response.blob());
  el("a", {href: url, download: name}).click();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

function downloadCommand(artifact) {
  const dir = artifact.loadable_dirs[0];
  return dir ? `opentinker download ${artifact.artifact_id} --path ${dir} -o ./${dir}`
    : `opentinker download ${artifact.artifact_id}`;
}

function size(bytes) {
  const units = ["B", "KiB", "MiB", "GiB"];
  let value = bytes, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}
