// A metric's curve as SVG: steps on x, values on y, min / middle / max grid lines.

import {fmt, svg} from "./dom.js";

const MARKED_POINTS = 100;  // a curve with at most this many points marks each one

// size: {width, height} of the drawing (the page scales it); id: the svg's id ("" for none, as in
// the small panels, which are many on a page).
export function drawChart(container, name, points, {width = 720, height = 280, id = "metric-chart",
  testid = "metric-chart"} = {}) {
  const left = 64, right = 16, top = 16, bottom = 36;
  const valid = points.filter(([, value]) => value !== null);
  const chart = svg("svg", {...(id ? {id} : {}), "data-testid": testid, "data-metric": name,
    "data-points": valid.length, viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img",
    "aria-label": `${name} by step`});
  chart.append(svg("rect", {x: left, y: top, width: width - left - right, height: height - top - bottom,
    class: "plot"}));
  if (!valid.length) {
    chart.append(svg("text", {x: width / 2, y: height / 2, class: "empty", "text-anchor": "middle",
      text: `no ${name} yet`}));
    container.replaceChildren(chart);
    return;
  }
  if (valid.length === 1) {  // one measurement (an inference job's accuracy): its value, not an axis
    const [[step, value]] = valid;
    chart.append(svg("text", {x: width / 2, y: height / 2, class: "single", "text-anchor": "middle",
      "data-testid": "single-value", text: fmt(value)}));
    chart.append(svg("text", {x: width / 2, y: height / 2 + 28, class: "tick", "text-anchor": "middle",
      text: `at step ${fmt(step)}: one measurement so far`}));
    container.replaceChildren(chart);
    return;
  }
  const steps = valid.map(([step]) => step), values = valid.map(([, value]) => value);
  let [x0, x1] = [Math.min(...steps), Math.max(...steps)];
  let [y0, y1] = [Math.min(...values), Math.max(...values)];
  if (x0 === x1) [x0, x1] = [x0 - 1, x1 + 1];
  if (y0 === y1) [y0, y1] = [y0 - 0.5, y1 + 0.5];
  const x = (step) => left + ((step - x0) / (x1 - x0)) * (width - left - right);
  const y = (value) => height - bottom - ((value - y0) / (y1 - y0)) * (height - top - bottom);
  for (const [value, label] of [[y0, fmt(y0)], [(y0 + y1) / 2, fmt((y0 + y1) / 2)], [y1, fmt(y1)]]) {
    chart.append(svg("line", {x1: left, x2: width - right, y1: y(value), y2: y(value), class: "grid"}));
    chart.append(svg("text", {x: left - 6, y: y(value) + 4, "text-anchor": "end", class: "tick", text: label}));
  }
  // the first label starts at the axis and the last ends at it: neither is clipped by the frame
  for (const [step, anchor] of [[x0, "start"], [x1, "end"]]) {
    chart.append(svg("text", {x: x(step), y: height - bottom + 18, "text-anchor": anchor, class: "tick",
      text: `step ${fmt(step)}`}));
  }
  const line = valid.map(([step, value]) => `${x(step).toFixed(1)},${y(value).toFixed(1)}`).join(" ");
  chart.append(svg("polyline", {points: line, class: "series", "data-testid": "metric-line"}));
  if (valid.length <= MARKED_POINTS) {
    for (const [step, value] of valid) {
      chart.append(svg("circle", {cx: x(step), cy: y(value), r: 2.5, class: "point"}));
    }
  }
  const [lastStep, lastValue] = valid[valid.length - 1];
  chart.append(svg("circle", {cx: x(lastStep), cy: y(lastValue), r: 4, class: "last"}));
  container.replaceChildren(chart);
}
