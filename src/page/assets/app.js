// The operator page's script. Every value from the server (config keys, descriptor
// values sent by callers, error texts) enters the document as text (textContent or text
// nodes), never as markup.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const POLL_MS = 1000;
const REFUSED_ROWS = 15; // the table's rows; state.json has more

const page = {
  seq: null,       // the latest tick received
  loads: null,     // the config loads of the tree shown
  window: 600,     // ticks a line keeps
  total: [],       // [allowed, over] per tick, oldest first
  lines: new Map(),// "domain\u0000path" -> points, aligned with total
  rates: new Map(),// "domain\u0000path" -> the tree's rate element
};

function $(id) { return document.getElementById(id); }

// An element with text children (strings) and element children.
function el(tag, className, ...children) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  for (const child of children) {
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function cell(text, className) { return el("td", className, String(text)); }

function ruleId(domain, path) { return domain + "\u0000" + path; }

function fixed(n) { return n >= 100 ? String(Math.round(n)) : n.toFixed(1); }

// Absolute, from the origin: a page opened as http://user:token@host/ has a base URL
// with credentials, which fetch refuses to resolve relative URLs against.
function at(path) { return location.origin + path; }

function fetchJson(url) {
  return fetch(at(url), { credentials: "same-origin", cache: "no-store" }).then((r) => {
    if (!r.ok) throw new Error(url + ": HTTP " + r.status);
    return r.json();
  });
}

// `points` with zeros in front up to `n`: a young line starts at the right, where the
// newest tick is, so that every chart's time axis is the same.
function padTo(points, n) {
  return points.length >= n ? points : new Array(n - points.length).fill([0, 0]).concat(points);
}

// A chart of two lines (allowed, over) over `points`, as an SVG element.
function chart(points, className) {
  const box = el("div", "chart " + className);
  const svg = document.createElementNS(SVG, "svg");
  const width = Math.max(points.length - 1, 1);
  let top = 1;
  for (const [a, o] of points) top = Math.max(top, a, o);
  svg.setAttribute("viewBox", "0 0 " + width + " " + top);
  svg.setAttribute("preserveAspectRatio", "none");
  const axis = document.createElementNS(SVG, "line");
  axis.setAttribute("class", "axis");
  axis.setAttribute("x1", "0"); axis.setAttribute("x2", String(width));
  axis.setAttribute("y1", String(top)); axis.setAttribute("y2", String(top));
  svg.append(axis);
  [["allowed", 0], ["over", 1]].forEach(([name, i]) => {
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("class", name);
    line.setAttribute("points", points.map((p, x) => x + "," + (top - p[i])).join(" "));
    svg.append(line);
  });
  box.append(svg);
  return box;
}

function keep(points) {
  return points.length > page.window ? points.slice(points.length - page.window) : points;
}

// Adds a state document's points to the lines kept here.
function addPoints(state) {
  page.window = state.window;
  const before = page.total.length;
  page.total = keep(page.total.concat(state.total));
  const lines = new Map();
  for (const rule of state.rules) {
    const id = ruleId(rule.domain, rule.path);
    const known = page.lines.get(id) || new Array(before).fill([0, 0]);
    lines.set(id, keep(known.concat(rule.points)));
  }
  page.lines = lines;
}

function showRates(state) {
  const minutes = String(Math.round(state.window * state.interval_s / 60));
  $("window-minutes").textContent = minutes;
  $("rule-window-minutes").textContent = minutes;
  const total = $("total-chart");
  total.replaceChildren(...chart(padTo(page.total, state.window), "big").childNodes);
  const body = $("rule-rates").tBodies[0];
  const rows = state.rules.map((rule) => {
    const points = page.lines.get(ruleId(rule.domain, rule.path)) || [];
    const spark = el("td", null, chart(padTo(points, state.window), "small"));
    return el("tr", null, cell(rule.domain + " · " + rule.path, "key"),
      cell(fixed(rule.last[0] / state.interval_s), "num"),
      cell(fixed(rule.last[1] / state.interval_s), "num"), spark);
  });
  body.replaceChildren(...rows);
  const uncharted = $("uncharted");
  uncharted.hidden = state.uncharted === 0;
  uncharted.textContent = state.uncharted + " more rules saw traffic but have no line (all lines taken); the total counts them.";
  for (const [id, span] of page.rates) {
    const points = page.lines.get(id);
    const last = points ? points[points.length - 1] : [0, 0];
    span.replaceChildren(fixed(last[0] / state.interval_s) + "/s allowed",
      last[1] ? el("span", "over", " · " + fixed(last[1] / state.interval_s) + "/s over") : "");
  }
}

function showRefused(state) {
  $("refusal-window").textContent = state.refusal_window_s + "–" + 2 * state.refusal_window_s;
  const rows = state.refused.slice(0, REFUSED_ROWS).map((r) => el("tr", null,
    cell(r.domain + " · " + r.path, "key"), cell(r.key, "key"), cell(r.count, "num")));
  const more = state.refused.length - rows.length;
  if (more > 0) rows.push(el("tr", null, el("td", "muted", more + " more (in /page/state.json)")));
  $("refused-table").tBodies[0].replaceChildren(...rows);
  $("refused-none").hidden = rows.length > 0;
}

function showMulti(state) {
  const rows = [];
  for (const rule of state.multi) {
    let most = 0;
    rule.limits.forEach((l, i) => { if (l.binding > rule.limits[most].binding) most = i; });
    rule.limits.forEach((l, i) => rows.push(el("tr", i === most && l.binding > 0 ? "binds" : null,
      cell(i === 0 ? rule.domain + " · " + rule.path : "", "key"),
      cell(l.label + (i === most && l.binding > 0 ? " (binds most)" : "")),
      cell(l.within, "num"), cell(l.over, "num"), cell(l.binding, "num"))));
  }
  $("multi").hidden = rows.length === 0;
  $("multi-table").tBodies[0].replaceChildren(...rows);
}

function percent(part, whole) { return whole ? (100 * part / whole).toFixed(1) + "%" : "–"; }

function showStore(store) {
  const health = $("store-health");
  health.textContent = store.kind + " store: " + store.health;
  health.className = "badge " + (store.health === "OK" ? "ok" : "bad");
  const facts = [["store", store.kind], ["health", store.health]];
  if (store.memory) {
    const m = store.memory;
    facts.push(["buckets", m.buckets + " of " + m.max_buckets]);
    facts.push(["bytes", m.bytes + " of " + m.max_bytes]);
    facts.push(["evictions", m.evictions + " (" + m.evictions_weakened + " not yet full again)"]);
    facts.push(["holds", m.holds + " in force (" + m.holds_expired + " released unsettled after their TTL)"]);
  }
  const nodes = $("redis-nodes");
  nodes.hidden = !store.redis;
  if (store.redis) {
    const r = store.redis;
    const asked = r.over_limit_hits + r.lease_hits + r.misses;
    facts.push(["failure policy", r.failure_policy]);
    facts.push(["over-limit cache hits", r.over_limit_hits + " (" + percent(r.over_limit_hits, asked) + ")"]);
    facts.push(["lease hits", r.lease_hits + " (" + percent(r.lease_hits, asked) + ")"]);
    facts.push(["sent to Redis", String(r.misses)]);
    facts.push(["script calls", r.calls ? r.calls + " (" + (r.call_requests / r.calls).toFixed(1) +
      " requests a call, " + (1000 * r.call_seconds / r.calls).toFixed(2) + " ms a call)" : "0"]);
    facts.push(["Redis errors", r.errors + ", answered by the policy: " + r.fallbacks]);
    nodes.tBodies[0].replaceChildren(...r.nodes.map((n) => el("tr", null, cell(n.name),
      cell(n.down === null ? "deciding" : "circuit open: " + n.down),
      cell(n.round_trip_us ? (n.round_trip_us / 1000).toFixed(2) + " ms" : "–", "num"))));
  }
  $("store-info").replaceChildren(...facts.flatMap(([k, v]) => [el("dt", null, k), el("dd", null, v)]));
}

function showError(error) {
  $("reload-error").hidden = error === null;
  $("reload-error-text").textContent = error === null ? "" : error;
}

// A limit in words; its name only in a list of several (a single limit's is the rule's).
function limitText(l, named) {
  const unit = l.unit.toLowerCase();
  const per = l.multiplier === 1 ? unit : l.multiplier + " " + unit + "s";
  return l.requests_per_unit + " per " + per + ", burst " + l.burst + ", " + l.algorithm +
    (l.charge ? ", charges always" : "") + (named && l.name ? " (" + l.name + ")" : "");
}

function showConfig(config) {
  page.loads = config.loads;
  const meta = config.kind + " " + config.source + " · version " + config.version +
    " · fingerprint " + config.fingerprint + " · loaded " + config.loads + " time(s)" +
    (config.changed_at ? " · loaded at " + config.changed_at : "") +
    (config.global_shadow ? " · global shadow mode" : "") +
    " · default algorithm " + config.default_algorithm;
  $("config-meta").textContent = meta;
  showError(config.error);
  page.rates = new Map();
  const tree = $("rules-tree");
  const domains = config.domains.map((domain) => {
    const root = el("ul");
    const stack = [root];
    for (const entry of domain.entries) {
      stack.length = entry.depth + 1;
      const item = el("li", null, el("code", null, entry.key));
      if (entry.rule) {
        const rule = entry.rule;
        if (rule.unlimited) item.append(el("span", "mark", "unlimited"));
        for (const l of rule.limits) item.append(el("span", "limit", limitText(l, rule.limits.length > 1)));
        if (rule.holds && rule.holds.max_in_flight !== null) {
          item.append(el("span", "limit", rule.holds.max_in_flight + " in flight"));
        }
        if (rule.holds) item.append(el("span", "mark", (rule.holds.max_in_flight === null ? "reserve" : "concurrency") +
          ", ttl " + rule.holds.ttl_seconds + "s"));
        if (rule.name) item.append(el("span", "mark", "name " + rule.name));
        if (rule.shadow) item.append(el("span", "mark", "shadow"));
        if (rule.quota) item.append(el("span", "mark", "quota"));
        if (rule.replaces.length) item.append(el("span", "mark", "replaces " + rule.replaces.join(", ")));
        const rate = el("span", "rate");
        rate.dataset.rule = rule.path;
        page.rates.set(ruleId(domain.name, rule.path), rate);
        item.append(rate);
      }
      const list = el("ul");
      item.append(list);
      stack[entry.depth].append(item);
      stack.push(list);
    }
    const details = el("details", "tree", el("summary", null, el("strong", null, domain.name)), root);
    details.open = true;
    details.dataset.domain = domain.name;
    return details;
  });
  if (config.left_out) domains.push(el("p", "muted", config.left_out + " more entries: see /rlconfig."));
  tree.replaceChildren(...domains);
}

async function poll() {
  try {
    const after = page.seq === null ? "" : "?after=" + page.seq;
    const state = await fetchJson("/page/state.json" + after);
    if (page.seq !== null && state.seq < page.seq) {
      // A restarted server counts ticks from 0 again: start over.
      Object.assign(page, { seq: null, loads: null, total: [], lines: new Map() });
      setTimeout(poll, 0);
      return;
    }
    if (state.loads !== page.loads) showConfig(await fetchJson("/page/config.json"));
    showError(state.error);
    addPoints(state);
    page.seq = state.seq;
    showRates(state);
    showRefused(state);
    showMulti(state);
    showStore(state.store);
    $("rlqs-text").textContent = state.rlqs;
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    $("updated").textContent = "cannot reach meshlimit: " + e.message;
  }
  setTimeout(poll, POLL_MS);
}

async function explain(event) {
  event.preventDefault();
  const query = new URLSearchParams();
  query.append("domain", $("explain-domain").value.trim());
  for (const line of $("explain-descriptors").value.split("\n")) {
    if (line.trim()) query.append("descriptor", line.trim());
  }
  const out = $("explain-result");
  out.textContent = "…";
  try {
    const response = await fetch(at("/explain?" + query), { credentials: "same-origin", cache: "no-store" });
    const text = await response.text();
    out.textContent = response.ok ? text : "HTTP " + response.status + ": " + text;
  } catch (e) {
    out.textContent = "cannot reach meshlimit: " + e.message;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("explain-form").addEventListener("submit", explain);
  poll();
});
