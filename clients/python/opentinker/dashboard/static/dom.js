// DOM helpers shared by the views: element builders, number and time formats, the view mount.

const SVG_NS = "http://www.w3.org/2000/svg";

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, String(value));
  }
  return node;
}

export function fmt(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (Number.isInteger(value) || Math.abs(value) >= 1000) return String(Math.round(value));
  return Number(value).toPrecision(4).replace(/\.?0+$/, "");
}

export function fmtTime(iso) {
  return iso ? new Date(iso).toLocaleString() : "–";
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export function stateBadge(state, id) {
  return el("span", {id, class: `state state-${state}`, "data-state": state, "data-testid": id && "job-state",
    text: state});
}

export function progressBar(step, total, id) {
  const percent = total > 0 ? Math.min(100, (100 * step) / total) : 0;
  const bar = el("div", {class: "bar", id, role: "progressbar", "aria-valuenow": step, "aria-valuemax": total});
  bar.append(el("div", {class: "fill", style: `width:${percent.toFixed(1)}%`}));
  return bar;
}

export function headerRow(...titles) {
  return el("thead", {}, el("tr", {}, titles.map((title) => el("th", {text: title}))));
}

export function mount(name, ...children) {
  const view = document.getElementById("view");
  view.dataset.view = name;
  view.replaceChildren(...children);
  for (const link of document.querySelectorAll("nav a")) {
    link.classList.toggle("active", link.id === `nav-${name === "job" ? "jobs" : name}`);
  }
}

export function poll(load, ms) {
  let timer = null, stopped = false;
  const tick = async () => {
    await load();
    if (!stopped) timer = setTimeout(tick, ms);
  };
  tick();
  return {stop() { stopped = true; clearTimeout(timer); }};
}
