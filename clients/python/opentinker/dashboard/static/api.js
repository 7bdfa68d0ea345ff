// The dashboard's JSON API and a job's event stream (Server-Sent Events read with fetch, so the
// API key can travel in the Authorization header; the stream resumes with Last-Event-ID).

import {sleep} from "./dom.js";

export const KEY_STORAGE = "opentinker.apiKey";
const RECONNECT_MS = 1000;

export class ApiError extends Error {
  constructor(status, body) {
    super(body.message || `HTTP ${status}`);
    this.status = status;
    this.code = body.code || "UNKNOWN";
  }
}

export function authHeaders() {
  const key = localStorage.getItem(KEY_STORAGE);
  return key ? {Authorization: `Bearer ${key}`} : {};
}

export async function api(path, options = {}) {
  const headers = {...authHeaders(), ...(options.body ? {"Content-Type": "application/json"} : {})};
  const response = await fetch(path, {...options, headers});
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

export function showNotice(text) {
  const notice = document.getElementById("notice");
  notice.textContent = text;
  notice.hidden = !text;
}

export function reportError(error) {
  if (error instanceof ApiError && error.status === 401) {
    showNotice(`The Scheduler did not accept the key (${error.message}). Paste an API key above.`);
  } else if (error instanceof ApiError && error.status === 503) {
    showNotice(`The Scheduler is unreachable: ${error.message}`);
  } else {
    showNotice(`Error: ${error.message}`);
  }
}

export class EventFeed {
  // handlers: {job, message, end, failure, status}; lastId: resume after this sequence.
  constructor(url, lastId, handlers) {
    this.url = url;
    this.lastId = lastId;
    this.handlers = handlers;
    this.abort = new AbortController();
    this.finished = false;
  }

  stop() {
    this.finished = true;
    this.abort.abort();
  }

  async run() {
    while (!this.finished) {
      try {
        await this.connectOnce();
      } catch (error) {
        if (this.finished) return;
      }
      if (this.finished) return;
      this.handlers.status("reconnecting");
      await sleep(RECONNECT_MS);
    }
  }

  async connectOnce() {
    const headers = authHeaders();
    if (this.lastId) headers["Last-Event-ID"] = String(this.lastId);
    const response = await fetch(this.url, {headers, signal: this.abort.signal});
    if (!response.ok) {
      const error = new ApiError(response.status, await response.json().catch(() => ({})));
      this.handlers.failure(error);
      if (response.status < 500) this.finished = true;
      return;
    }
    this.handlers.status("live");
    await this.read(response.body.getReader());
  }

  async read(reader) {
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, {stream: true});
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        this.dispatch(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
      }
    }
  }

  dispatch(block) {
    let name = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") name = value;
      else if (field === "data") data.push(value);
      else if (field === "id" && value) this.lastId = Number(value);
    }
    if (!data.length) return;
    const payload = JSON.parse(data.join("\n"));
    if (name === "end") this.finished = true;
    if (name === "failure") this.handlers.failure(new ApiError(0, payload));
    else if (this.handlers[name]) this.handlers[name](payload);
  }
}
