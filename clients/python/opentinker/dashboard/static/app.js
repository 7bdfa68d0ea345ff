// OpenTinker dashboard: one page, four views (jobs, one job, workers, tenants), no build step.
// This module: the list views, routing (history API) and the API key form.

import {ApiError, KEY_STORAGE, api, reportError, showNotice} from "./api.js";
import {el, fmt, fmtTime, headerRow, mount, poll, progressBar, stateBadge} from "./dom.js";
import {DEFAULT_METRIC, jobView} from "./job.js";

const LIST_REFRESH_MS = 2000;
let current = {stop() {}};

function jobsView() {
  const body = el("tbody", {id: "jobs-body"});
  const table = el("table", {id: "jobs-table", "data-testid": "jobs-table"},
    headerRow("Job", "Name", "Type", "State", "Progress", "Latest reward", "Created"), body);
  mount("jobs", el("h2", {text: "Jobs"}), table);
  return poll(async () => {
    try {
      const {jobs} = await api("/api/jobs?page_size=100");
      showNotice("");
      body.replaceChildren(...(jobs.length ? jobs.map(jobRow)
        : [el("tr", {}, el("td", {colspan: 7, class: "muted", text: "No jobs yet."}))]));
    } catch (error) {
      reportError(error);
    }
  }, LIST_REFRESH_MS);
}

function jobRow(job) {
  const {step, total_steps: total, latest_metrics: latest} = job.progress;
  return el("tr", {"data-testid": "job-row", "data-job-id": job.job_id},
    el("td", {}, el("a", {href: `/jobs/${encodeURIComponent(job.job_id)}`, "data-nav": true,
      "data-testid": "job-link", text: job.job_id})),
    el("td", {text: job.display_name || "–"}),
    el("td", {text: job.type}),
    el("td", {}, stateBadge(job.state)),
    el("td", {class: "progress-cell"}, progressBar(step, total),
      el("span", {class: "muted", text: `${step} / ${total}`})),
    el("td", {class: "number", "data-testid": "job-reward", text: fmt(latest[DEFAULT_METRIC] ?? null)}),
    el("td", {class: "muted", text: fmtTime(job.create_time)}));
}

const ADMIN_ONLY = {
  workers: "Workers and their leases are visible to admin keys only.",
  tenants: "Tenants and their usage are visible to admin keys only.",
};

function deniedPanel(id, headline, error) {
  return el("section", {id, "data-testid": id, class: "panel denied"}, el("h3", {text: headline}),
    el("p", {class: "muted", text: error.message}),
    el("p", {text: "Paste an admin key above to see them."}));
}

function workersView() {
  const list = el("div", {id: "workers", "data-testid": "workers"});
  mount("workers", el("h2", {text: "Workers"}), list);
  return poll(async () => {
    try {
      const {workers} = await api("/api/workers");
      showNotice("");
      const empty = el("p", {class: "muted", text: "No workers registered."});
      list.replaceChildren(...(workers.length ? workers.map(workerCard) : [empty]));
    } catch (error) {
      if (error instanceof ApiError && error.status === 403) {
        list.replaceChildren(deniedPanel("workers-denied", ADMIN_ONLY.workers, error));
      } else reportError(error);
    }
  }, LIST_REFRESH_MS);
}

function leaseRow(lease) {
  const job = el("a", {href: `/jobs/${encodeURIComponent(lease.job_id)}`, "data-nav": true, text: lease.job_id});
  return el("tr", {"data-testid": "lease", "data-job-id": lease.job_id},
    el("td", {text: lease.lease_id}), el("td", {}, job), el("td", {text: lease.device_ids.join(", ")}),
    el("td", {class: "number", text: lease.fencing_token}),
    el("td", {class: "muted", text: fmtTime(lease.expire_time)}));
}

function deviceTag(device) {
  const label = `${device.device_id} (${device.kind}${device.name ? `, ${device.name}` : ""})`;
  return el("code", {class: "device", "data-testid": "device", text: label});
}

function workerCard(worker) {
  const leases = worker.leases.length
    ? el("table", {class: "leases"}, headerRow("Lease", "Job", "Devices", "Fencing token", "Expires"),
      el("tbody", {}, worker.leases.map(leaseRow)))
    : el("p", {class: "muted", text: "No leases: idle."});
  const devices = worker.devices.length ? worker.devices.map(deviceTag)
    : el("span", {class: "muted", text: "none (capacity only)"});
  const seen = `${worker.role} at ${worker.address}; last heartbeat ${fmtTime(worker.last_heartbeat_time)}`;
  return el("section", {class: "panel worker", "data-testid": "worker", "data-worker-id": worker.worker_id,
    "data-role": worker.role},
    el("h3", {}, worker.worker_id, " ", el("span", {class: `state state-${worker.state}`, text: worker.state})),
    el("p", {class: "muted", text: seen}), el("p", {}, "Devices: ", devices), ...sharedBases(worker), leases);
}

// The base models the worker holds, each with the LoRA jobs whose adapters share it.
function sharedBases(worker) {
  if (!(worker.resident_models || []).length) return [];
  return [el("table", {class: "shared-bases", "data-testid": "shared-bases"},
    headerRow("Shared base", "Device", "Jobs on it"),
    el("tbody", {}, worker.resident_models.map(({model_key: key, device_id: device, job_ids: jobs}) =>
      el("tr", {"data-testid": "shared-base", "data-model-key": key},
        el("td", {}, el("code", {text: key})), el("td", {text: device}),
        el("td", {}, ...jobs.flatMap((id, i) => [i ? ", " : "", el("a", {href: `/jobs/${id}`, text: id})]))))))];
}

function usageCell(used, limit) {
  const cell = el("td", {class: "usage"});
  const quota = limit > 0 ? limit : "∞";  // 0 means unlimited
  cell.append(progressBar(used, limit > 0 ? limit : 0), el("span", {text: `${used} / ${quota}`}));
  return cell;
}

function tenantRow({tenant_id: id, display_name: name, usage, quota, create_time: created}) {
  return el("tr", {"data-testid": "tenant-row", "data-tenant-id": id},
    el("td", {text: id}), el("td", {text: name || "–"}),
    usageCell(usage.devices, quota.max_devices), usageCell(usage.running_jobs, quota.max_concurrent_jobs),
    usageCell(usage.queued_jobs, quota.max_queued_jobs), el("td", {class: "muted", text: fmtTime(created)}));
}

// What an empty Tenants page means, and how to get a row in it.
const NO_TENANTS = () => el("section", {class: "panel", "data-testid": "tenants-empty"},
  el("p", {text: "No tenants yet. Jobs submitted with the admin key run as the built-in \"system\" " +
    "tenant, which is not listed here."}),
  el("p", {}, "Create a tenant and a key for it with ", el("code", {text: "opentinker admin tenants create NAME"}),
    " and ", el("code", {text: "opentinker admin keys create NAME"}),
    "; its jobs, devices and queue then show here against its quota."));

function tenantsView() {
  const body = el("tbody", {id: "tenants-body"});
  const table = el("table", {id: "tenants-table", "data-testid": "tenants-table"},
    headerRow("Tenant", "Name", "Devices", "Running jobs", "Queued jobs", "Created"), body);
  const holder = el("div", {}, table);
  mount("tenants", el("h2", {text: "Tenants: usage against quota"}), holder);
  return poll(async () => {
    try {
      const {tenants} = await api("/api/tenants");
      showNotice("");
      body.replaceChildren(...tenants.map(tenantRow));
      holder.replaceChildren(...(tenants.length ? [table] : [NO_TENANTS()]));
    } catch (error) {
      if (error instanceof ApiError && error.status === 403) {
        holder.replaceChildren(deniedPanel("tenants-denied", ADMIN_ONLY.tenants, error));
      } else reportError(error);
    }
  }, LIST_REFRESH_MS * 2);
}

function route() {
  current.stop();
  const path = location.pathname;
  const job = path.match(/^\/jobs\/([^/]+)$/);
  if (job) current = jobView(decodeURIComponent(job[1]));
  else if (path === "/workers") current = workersView();
  else if (path === "/tenants") current = tenantsView();
  else current = jobsView();
}

function navigate(path) {
  if (path !== location.pathname) history.pushState({}, "", path);
  route();
}

document.addEventListener("click", (event) => {
  const link = event.target.closest("a[data-nav]");
  if (!link || event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
  event.preventDefault();
  navigate(new URL(link.href).pathname);
});

window.addEventListener("popstate", route);

function showKeyStatus() {
  const key = localStorage.getItem(KEY_STORAGE);
  document.getElementById("key-status").textContent = key
    ? `using your key …${key.slice(-4)}` : "using the dashboard's key";
}

document.getElementById("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = document.getElementById("api-key-input");
  if (input.value.trim()) localStorage.setItem(KEY_STORAGE, input.value.trim());
  input.value = "";
  showKeyStatus();
  route();
});

document.getElementById("api-key-clear").addEventListener("click", () => {
  localStorage.removeItem(KEY_STORAGE);
  showKeyStatus();
  route();
});

showKeyStatus();
route();
