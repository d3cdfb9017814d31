// dsflow web page: plain JavaScript over the REST API (api/v1), no libraries. See dsflow/server/web.py;
// the lineage graph is drawn by graph.js (loaded first).
"use strict";

const TOKEN_KEY = "dsflow.token";
const POLL_MS = 2000;
const TAIL_MAX = 200;

const page = {catalog: null, lineage: null, status: new Map(), selected: null, timer: null, session: 0,
              tail: null, states: new Map(), plan: null, events: []};

const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else if (k === "text") node.textContent = v; else node.setAttribute(k, v);
  }
  children.forEach((c) => node.append(c));
  return node;
}

function announce(text) {
  const region = $("announcer");
  region.textContent = "";
  window.setTimeout(() => { region.textContent = text; }, 50);
}

// ---- API ------------------------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    const info = (body && body.error) || {};
    super(info.message || (body && body.detail && JSON.stringify(body.detail)) || `HTTP ${status}`);
    this.status = status; this.code = info.code || ""; this.hint = info.hint || "";
  }
  get text() { return [this.code, this.message, this.hint && `(${this.hint})`].filter(Boolean).join(" "); }
}

function headers(extra = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? {...extra, Authorization: `Bearer ${token}`} : extra;
}

async function api(path, {method = "GET", body} = {}) {
  const init = {method, headers: headers(body === undefined ? {} : {"Content-Type": "application/json"})};
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(`api/v1/${path}`, init);
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    const error = new ApiError(response.status, data);
    if (response.status === 401 && path !== "auth/login") logout(`Session ended: ${error.text}`);
    throw error;
  }
  return data;
}

function showError(id, error) {
  $(id).textContent = error ? (error.text || String(error.message || error)) : "";
}

// ---- Login ----------------------------------------------------------------------------------------------------

async function login(event) {
  event.preventDefault();
  showError("login-error", null);
  try {
    const data = await api("auth/login", {method: "POST",
      body: {username: $("username").value, password: $("password").value}});
    $("password").value = "";
    sessionStorage.setItem(TOKEN_KEY, data.token);
    await start();
  } catch (error) {
    showError("login-error", error);
  }
}

async function useToken(event) {
  event.preventDefault();
  showError("login-error", null);
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token").value = "";
  try { await start(); } catch (error) { logout(error.text || String(error)); }
}

function logout(message = "") {
  sessionStorage.removeItem(TOKEN_KEY);
  page.session += 1;
  window.clearTimeout(page.timer);
  page.timer = null;
  stopTail();
  clearView();
  $("app").hidden = true;
  $("session").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message;
  $("username").focus();
}

function clearView() {
  // nothing of one user's session stays on the page for the next one
  Object.assign(page, {catalog: null, lineage: null, status: new Map(), selected: null, states: new Map(), plan: null,
    events: []});
  ["graph", "tail-records", "detail-history"].forEach((id) => $(id).replaceChildren());
  ["query-table", "plan-table", "view-table", "event-table"].forEach((id) => $(id).tBodies[0].replaceChildren());
  ["plan-table", "view-table", "detail-body"].forEach((id) => { $(id).hidden = true; });
  ["whoami", "plan-summary", "view-summary", "tail-summary", "status-updated"].forEach((id) => {
    $(id).textContent = "";
  });
  ["graph-error", "status-error", "plan-error", "view-error", "tail-error", "events-error"].forEach((id) => showError(id, null));
  $("detail-sql").textContent = "";
  $("detail-title").textContent = "Details";
  $("detail-empty").hidden = false;
}

async function start() {
  const session = ++page.session;  // answers that arrive after a log-out (a later session) are dropped
  const me = await api("whoami");
  if (session !== page.session) return;
  $("whoami").textContent = `${me.user} (${(me.roles || []).join(", ")})`;
  $("login").hidden = true;
  $("session").hidden = false;
  $("app").hidden = false;
  $("main").focus();
  announce(`Logged in as ${me.user}`);
  await Promise.all([loadCatalog(session), loadLineage(session)]);
  await pollLoop(session);
}

async function pollLoop(session) {
  // the next poll is scheduled when this one is answered: a slow server never gets requests piling up
  if (session !== page.session) return;
  await pollStatus(session);
  await pollEvents(session);
  if (session === page.session) page.timer = window.setTimeout(() => pollLoop(session), POLL_MS);
}

// ---- Event log ------------------------------------------------------------------------------------------------

const EVENTS_SHOWN = 200;

async function pollEvents(session) {
  try {
    const last = page.events.length ? page.events[page.events.length - 1] : null;
    // 30 s behind the newest one shown: an event of another process can be appended a moment after a later one
    const since = last ? new Date(Date.parse(last.time) - 30000).toISOString() : null;
    const fresh = await api(since ? `events?since=${encodeURIComponent(since)}` : "events");
    if (session !== page.session) return;
    const seen = new Set(page.events.map((e) => e.id));
    page.events = page.events.concat(fresh.filter((e) => !seen.has(e.id)))
      .sort((a, b) => (a.time < b.time ? -1 : a.time > b.time ? 1 : 0)).slice(-EVENTS_SHOWN);
    $("event-table").tBodies[0].replaceChildren(...page.events.slice().reverse().map((e) => el("tr", {},
      el("td", {text: e.time}), el("td", {text: e.kind}), el("td", {text: e.object}), el("td", {text: e.actor}),
      el("td", {text: Object.entries(e.detail || {}).map(([k, v]) =>
        `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`).join(", ")}))));
    showError("events-error", null);
  } catch (error) {
    if (session === page.session) showError("events-error", error);
  }
}

// ---- Catalog and lineage graph ---------------------------------------------------------------------------------

async function loadCatalog(session) {
  let catalog = {relations: [], queries: []};
  try {
    catalog = await api("catalog");
  } catch (error) {
    if (session === page.session) showError("status-error", error);
  }
  if (session !== page.session) return;
  page.catalog = catalog;
  const relations = page.catalog.relations || [];
  fillSelect($("view-select"), relations.filter((r) => r.kind === "materialized_view"));
  fillSelect($("tail-select"), relations.filter((r) => ["stream", "changelog"].includes(r.kind)));
  $("view-form").querySelector("button").disabled = $("view-select").disabled;
  $("tail-start").disabled = $("tail-select").disabled;
}

function fillSelect(select, relations) {
  select.replaceChildren(...relations.map((r) => el("option", {value: r.address, text: relationName(r)})));
  select.disabled = relations.length === 0;
  if (!relations.length) select.append(el("option", {value: "", text: "(none you may read)"}));
}

function relationName(relation) {
  return relation.fqn || [relation.database, relation.schema, relation.name].filter(Boolean).join(".")
    || relation.address;
}

async function loadLineage(session) {
  try {
    const lineage = await api("lineage");
    if (session !== page.session) return;
    page.lineage = lineage;
    drawLineage($("graph"), page.lineage, {onSelect: selectNode, label: nodeLabel});
    showError("graph-error", null);
  } catch (error) {
    showError("graph-error", error);
  }
}

function nodeLabel(node) {
  const state = page.status.get(node.id)?.state || node.state;
  return `${node.kind} ${node.label || node.id}${state ? `, ${state}` : ""}`;
}

function selectNode(node) {
  if (node.kind === "query") return selectQuery(node.id);
  const relation = (page.catalog?.relations || []).find((r) => r.address === node.id);
  if (relation?.kind === "materialized_view") { $("view-select").value = relation.address; }
  else if (relation?.topic) { $("tail-select").value = relation.address; }
  showRelation(relation || {address: node.id, kind: node.kind, name: node.label});
}

// ---- Queries and status ---------------------------------------------------------------------------------------

function queryRecord(address) {
  return (page.catalog?.queries || []).find((q) => q.address === address) || {address, name: address};
}

function allQueryAddresses() {
  const fromCatalog = (page.catalog?.queries || []).map((q) => q.address);
  const fromStatus = [...page.status.keys()].filter((a) => a.startsWith("query."));
  return [...new Set([...fromCatalog, ...fromStatus])].sort();
}

async function pollStatus(session) {
  try {
    const entries = await api("status");
    if (session !== page.session) return;
    page.status = new Map(entries.map((e) => [e.address, e]));
    renderQueries();
    noteStateChanges();
    if (page.selected?.kind === "query") renderQueryFacts(page.selected.address);
    $("status-updated").textContent = `Last update ${new Date().toLocaleTimeString()}.`;
    showError("status-error", null);
  } catch (error) {
    if (session === page.session) showError("status-error", error);
  }
}

function noteStateChanges() {
  const changes = [];
  for (const [address, entry] of page.status) {
    const before = page.states.get(address);
    if (before !== undefined && before !== entry.state) changes.push(`${shortName(address)} is now ${entry.state}`);
    page.states.set(address, entry.state);
    const node = document.querySelector(`#graph a.node[data-id="${CSS.escape(address)}"]`);
    if (node) {
      node.setAttribute("data-state", entry.state || "");
      node.setAttribute("aria-label", nodeLabel({id: address, kind: address.split(".")[0], label: shortName(address)}));
      const kind = node.querySelector(".node-kind");
      if (kind) kind.textContent = `${address.split(".")[0]} · ${entry.state}`;
    }
  }
  if (changes.length) announce(changes.join("; "));
}

function shortName(address) {
  return address.split(".").slice(1).join(".");
}

function markSelected(address) {
  document.querySelectorAll("#graph a.node").forEach((node) => {
    if (node.dataset.id === address) node.setAttribute("aria-current", "true");
    else node.removeAttribute("aria-current");
  });
}

function renderQueries() {
  const body = $("query-table").tBodies[0];
  const addresses = allQueryAddresses();
  const existing = new Map([...body.rows].map((row) => [row.dataset.address, row]));
  existing.forEach((row, address) => { if (!addresses.includes(address)) row.remove(); });
  addresses.forEach((address) => {
    let row = existing.get(address);
    if (!row) {
      row = queryRow(address);
      body.append(row);
    }
    const entry = page.status.get(address) || {};
    const cells = row.cells;
    cells[1].textContent = entry.state || queryRecord(address).state || "not deployed";
    cells[1].className = `state state-${cells[1].textContent.split(" ")[0]}`;
    cells[2].textContent = rate(entry.input_rows_per_second);
    cells[3].textContent = lag(entry);
    cells[4].textContent = entry.batch_id ?? "-";
    cells[5].textContent = when(entry.last_progress_at);
    cells[5].title = entry.last_progress_at || "";
    row.classList.toggle("selected", page.selected?.address === address);
  });
}

function queryRow(address) {
  const button = el("button", {type: "button", class: "link", text: shortName(address),
                               "aria-label": `Show query ${shortName(address)}`});
  button.addEventListener("click", () => selectQuery(address));
  const row = el("tr", {}, el("th", {scope: "row"}, button), el("td"), el("td", {class: "num"}),
                 el("td", {class: "num"}), el("td", {class: "num"}), el("td"));
  row.dataset.address = address;
  return row;
}

function rate(value) {
  return typeof value === "number" ? value.toFixed(1) : "-";
}

function lag(entry) {
  // lag_records: records the sources hold past what the query read; lag_max_millis: age of the oldest unread
  // record (Kinesis); lag_total_wal_bytes: write-ahead log past the last change read (change streams)
  const parts = [];
  const records = entry.lag_records ?? (typeof entry.lag === "number" ? entry.lag : undefined);
  if (records !== undefined && records !== null) parts.push(String(records));
  if (typeof entry.lag_max_millis === "number") parts.push(`${entry.lag_max_millis} ms`);
  if (typeof entry.lag_total_wal_bytes === "number") parts.push(`${entry.lag_total_wal_bytes} B WAL`);
  return parts.length ? parts.join(", ") : "-";
}

function lagParts(field, entry, unit) {
  const per = entry[field];
  return per && typeof per === "object" ? Object.entries(per).flatMap(([topic, partitions]) =>
    Object.entries(partitions || {}).map(([partition, n]) => `${topic}[${partition}]: ${n}${unit}`)) : [];
}

function lagDetail(entry) {
  const parts = [...lagParts("lag", entry, ""), ...lagParts("lag_millis", entry, " ms"),
                 ...lagParts("lag_wal_bytes", entry, " B")];
  const records = entry.lag_records;
  const total = records !== undefined && records !== null ? `${records} record(s)` : lag(entry);
  return total === "-" ? total : total + (parts.length ? ` (${parts.join(", ")})` : "");
}

function latencyDetail(entry) {
  const known = (value) => value !== undefined && value !== null;
  const parts = [known(entry.batch_latency_ms) ? `batch ${entry.batch_latency_ms} ms` : "",
                 known(entry.event_time_lag_ms) ? `event time lag ${entry.event_time_lag_ms} ms` : "",
                 known(entry.oldest_event_lag_ms) ? `oldest event ${entry.oldest_event_lag_ms} ms` : ""];
  const shown = parts.filter(Boolean);
  return shown.length ? `${shown.join(", ")} (batch ${entry.latency_batch_id})` : "-";
}

function when(value) {
  if (!value) return "-";
  const date = new Date(typeof value === "number" && value < 1e12 ? value * 1000 : value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleTimeString();
}

async function selectQuery(address) {
  page.selected = {kind: "query", address};
  markSelected(address);
  $("detail-title").textContent = `Query ${shortName(address)}`;
  $("detail-empty").hidden = true;
  $("detail-body").hidden = false;
  const record = queryRecord(address);
  $("detail-shadow").textContent = "";
  renderQueryText(record);
  renderQueryFacts(address);
  renderQueries();
  $("detail-title").focus();
  announce(`Showing query ${shortName(address)}`);
  try {
    const name = record.name || shortName(address);
    const detail = await api(`queries/${encodeURIComponent(name)}`);
    if (page.selected?.address === address) renderQueryText({...record, ...detail});
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 404) showError("status-error", error);
  }
}

function renderQueryText(record) {
  $("sql-title").textContent = "SQL";
  $("detail-name").textContent = record.name || shortName(record.address);
  $("detail-sink").textContent = record.sink || "-";
  $("detail-sources").textContent = (record.sources || []).join(", ") || "-";
  $("detail-sql").textContent = record.sql || "";
  $("detail-history").replaceChildren(...(record.history || []).map((v) => el("li", {text:
    `${String(v.version || "").slice(0, 8)}${v.category ? ` (${v.category})` : ""}: started ${stamp(v.started_at)}` +
    (v.stopped_at ? `, stopped ${stamp(v.stopped_at)}` : "")})));
}

function stamp(value) {
  const date = new Date(value);
  return value && !Number.isNaN(date.getTime()) ? date.toLocaleString() : String(value || "-");
}

function renderQueryFacts(address) {
  const entry = page.status.get(address) || {};
  const notes = [entry.restarts ? `${entry.restarts} restart(s)` : "", entry.next_retry ? `retry at ${entry.next_retry}` : ""];
  const state = entry.state || queryRecord(address).state || "not deployed";
  $("detail-state").textContent = notes.some(Boolean) ? `${state} (${notes.filter(Boolean).join(", ")})` : state;
  $("detail-rate").textContent = rate(entry.input_rows_per_second);
  $("detail-lag").textContent = lagDetail(entry);
  $("detail-latency").textContent = latencyDetail(entry);
  $("detail-batch").textContent = entry.batch_id ?? "-";
  $("detail-error").textContent = entry.error || entry.last_error || "-";
  $("detail-expectations").textContent = expectationsDetail(entry.expectations);
}

function expectationsDetail(rules) {
  const entries = Object.entries(rules || {});
  return entries.length ? entries.map(([rule, c]) =>
    `${rule} (${String(c.action || "").toUpperCase()}): ${c.passed ?? 0} passed, ${c.failed ?? 0} failed`).join("; ") : "-";
}

function showRelation(relation) {
  page.selected = {kind: "relation", address: relation.address};
  markSelected(relation.address);
  $("detail-title").textContent = `${relation.kind || "relation"} ${relation.name || relation.address}`;
  $("detail-empty").hidden = true;
  $("detail-body").hidden = false;
  $("detail-name").textContent = relation.address;
  $("detail-state").textContent = relation.kind || "-";
  ["detail-rate", "detail-lag", "detail-batch", "detail-error", "detail-expectations"].forEach((id) => {
    $(id).textContent = "-";
  });
  $("detail-sink").textContent = relation.topic ? `topic ${relation.topic}` : (relation.store || "-");
  $("detail-sources").textContent = "-";
  $("sql-title").textContent = "Columns";
  $("detail-history").replaceChildren();
  $("detail-shadow").textContent = "";
  $("detail-sql").textContent = (relation.columns || []).map((c) => `${c.name} ${c.type}`).join(",\n");
  renderQueries();
  $("detail-title").focus();
}

async function shadowDiff() {
  const selected = page.selected;
  if (!selected || selected.kind !== "query") return;
  const out = $("detail-shadow");
  out.textContent = "Comparing (up to 10 s)...";
  try {
    const name = queryRecord(selected.address).name || shortName(selected.address);
    const found = await api(`queries/${encodeURIComponent(name)}/shadow/diff?wait=10`);
    if (page.selected?.address === selected.address) out.textContent = shadowText(found);
  } catch (error) {
    out.textContent = error instanceof ApiError ? error.text : String(error);
  }
}

function shadowText(found) {
  const unit = found.kind === "stream" ? "rows" : "keys";
  const row = (r) => `${r.key != null ? `key ${r.key} ` : ""}${JSON.stringify(r.value)}${r.count > 1 ? ` x${r.count}` : ""}`;
  const lines = [
    `${found.kind} over source offsets ${JSON.stringify(found.offsets)}`,
    `live ${found.live_topic}: ${found.live_records} records, ${found.live_rows} ${unit}`,
    `shadow ${found.shadow_topic}: ${found.shadow_records} records, ${found.shadow_rows} ${unit}`,
    `equal ${unit}: ${found.same}`,
    ...found.only_live.slice(0, 20).map((r) => `only live: ${row(r)}`),
    ...found.only_shadow.slice(0, 20).map((r) => `only shadow: ${row(r)}`),
    ...found.differ.slice(0, 20).map((d) => `differ: key ${d.key}: live ${JSON.stringify(d.live)} shadow ${JSON.stringify(d.shadow)}`),
  ];
  const empty = !found.only_live.length && !found.only_shadow.length && !found.differ.length;
  return [...lines, empty ? "No difference." : "The versions differ."].join("\n");
}

// ---- Plan preview ---------------------------------------------------------------------------------------------

async function previewPlan() {
  const button = $("plan-run");
  if (button.getAttribute("aria-disabled") === "true") return;  // stays focusable while the plan runs
  button.setAttribute("aria-disabled", "true");
  showError("plan-error", null);
  $("plan-summary").textContent = "Planning…";
  try {
    page.plan = await api("plan", {method: "POST", body: {}});
    renderPlan();
  } catch (error) {
    $("plan-summary").textContent = "";
    showError("plan-error", error);
  } finally {
    button.removeAttribute("aria-disabled");
  }
}

function renderPlan() {
  if (!page.plan) return;
  const changes = page.plan.plan?.changes || [];
  const decisions = new Map((page.plan.authorization || []).map((a) => [a.address, a]));
  const shown = changes.filter((c) => $("plan-all").checked || c.action !== "no-op");
  const rows = shown.map((change) => {
    const decision = decisions.get(change.address);
    const allowed = change.action === "no-op" ? "-" : (!decision || decision.allowed ? "yes"
      : `no: ${decision.message || (decision.missing || []).map((m) => `${m.privilege} on ${m.on}`).join(", ")}`);
    const row = el("tr", {class: `action-${change.action}`}, el("th", {scope: "row", text: change.address}),
                   el("td", {text: change.action}), el("td", {text: [change.reason, change.effect]
                     .filter(Boolean).join("; ")}), el("td", {text: allowed}));
    row.dataset.address = change.address;
    row.dataset.allowed = allowed.startsWith("no") ? "false" : "true";
    return row;
  });
  $("plan-table").tBodies[0].replaceChildren(...rows);
  $("plan-table").hidden = rows.length === 0;
  const actionable = changes.filter((c) => c.action !== "no-op").length;
  const refused = [...decisions.values()].filter((d) => !d.allowed).length;
  $("plan-summary").textContent = actionable ? `${actionable} change(s); you may apply ${actionable - refused}` +
    (refused ? `, ${refused} refused.` : ".") : "No changes: the deployed state matches the working tree.";
}

// ---- Materialized views ---------------------------------------------------------------------------------------

function quoteName(name) {
  return name.split(".").map((part) => (/^[A-Za-z_][A-Za-z0-9_]*$/.test(part) ? part
    : `"${part.replace(/"/g, '""')}"`)).join(".");
}

async function showView(event) {
  event.preventDefault();
  const relation = (page.catalog?.relations || []).find((r) => r.address === $("view-select").value);
  if (!relation) return;
  showError("view-error", null);
  $("view-summary").textContent = "Reading…";
  try {
    const result = await api("views/query", {method: "POST",
      body: {sql: `SELECT * FROM ${quoteName(relationName(relation))} LIMIT 100`}});
    renderTable($("view-table"), result.columns || [], result.rows || []);
    $("view-summary").textContent = `${(result.rows || []).length} row(s) of ${relationName(relation)}` +
      ((result.rows || []).length >= 100 ? " (first 100)." : ".");
  } catch (error) {
    $("view-summary").textContent = "";
    $("view-table").hidden = true;
    showError("view-error", error);
  }
}

function renderTable(table, columns, rows) {
  table.tHead.replaceChildren(el("tr", {}, ...columns.map((c) => el("th", {scope: "col", text: c}))));
  table.tBodies[0].replaceChildren(...rows.map((row) => el("tr", {}, ...row.map((v) => el("td", {
    text: v === null ? "NULL" : (typeof v === "object" ? JSON.stringify(v) : String(v))})))));
  table.hidden = false;
}

// ---- Topic tail (Server-Sent Events read with fetch, so the token stays in a header) --------------------------

async function startTail(event) {
  event.preventDefault();
  stopTail();
  const address = $("tail-select").value;
  if (!address) return;
  const controller = new AbortController();
  page.tail = controller;
  $("tail-records").replaceChildren();
  $("tail-records").dataset.count = "0";
  $("tail-stop").disabled = false;
  $("tail-stop").focus();  // before Start is disabled, so the focus is never lost
  $("tail-start").disabled = true;
  showError("tail-error", null);
  $("tail-summary").textContent = `Following ${address}…`;
  try {
    const from = $("tail-beginning").checked ? "?from_beginning=true" : "";
    const response = await fetch(`api/v1/topics/${encodeURIComponent(address)}/tail${from}`,
      {headers: headers({Accept: "text/event-stream"}), signal: controller.signal});
    if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => null));
    await readEvents(response.body, onTailEvent);
  } catch (error) {
    if (error.name !== "AbortError") showError("tail-error", error);
  } finally {
    if (page.tail === controller) stopTail();
  }
}

async function readEvents(stream, onEvent) {
  const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const lines = block.split("\n");
      const data = lines.filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
      const type = (lines.find((l) => l.startsWith("event:")) || "event: message").slice(6).trim();
      if (data) onEvent(type, data);
    }
  }
}

function onTailEvent(type, data) {
  let payload = data;
  try { payload = JSON.parse(data); } catch { /* plain text */ }
  if (type === "ready") {
    $("tail-summary").textContent = `Following topic ${payload.topic || ""}: 0 record(s) so far.`;
    announce(`Following ${$("tail-select").selectedOptions[0]?.textContent || "the topic"}`);
  } else if (type === "error") {
    showError("tail-error", {text: [payload.code, payload.message || data, payload.hint && `(${payload.hint})`]
      .filter(Boolean).join(" ")});
  } else if (type === "record" || type === "message") {
    const list = $("tail-records");
    list.append(el("li", {text: describeRecord(payload)}));
    while (list.children.length > TAIL_MAX) list.firstElementChild.remove();
    const count = Number(list.dataset.count || 0) + 1;
    list.dataset.count = String(count);
    $("tail-summary").textContent = `${count} record(s) received.`;
  }
}

function describeRecord(record) {
  if (typeof record !== "object" || record === null) return String(record);
  if ("value" in record) {
    const where = record.partition !== undefined ? `[${record.partition}@${record.offset}] ` : "";
    const value = typeof record.value === "string" ? record.value : JSON.stringify(record.value);
    return `${where}${record.key !== undefined && record.key !== null ? `${record.key} → ` : ""}${value}`;
  }
  return JSON.stringify(record);
}

function stopTail() {
  if (page.tail) page.tail.abort();
  page.tail = null;
  $("tail-start").disabled = $("tail-select").disabled;
  $("tail-stop").disabled = true;
}

// ---- Start ----------------------------------------------------------------------------------------------------

function init() {
  $("login-form").addEventListener("submit", login);
  $("token-form").addEventListener("submit", useToken);
  $("logout").addEventListener("click", () => logout("Logged out."));
  $("plan-run").addEventListener("click", previewPlan);
  $("shadow-diff").addEventListener("click", shadowDiff);
  $("plan-all").addEventListener("change", renderPlan);
  $("view-form").addEventListener("submit", showView);
  $("tail-form").addEventListener("submit", startTail);
  $("tail-stop").addEventListener("click", () => {
    stopTail();
    $("tail-summary").textContent += " Stopped.";
    announce($("tail-summary").textContent);
    $("tail-start").focus();
  });
  if (sessionStorage.getItem(TOKEN_KEY)) start().catch((error) => logout(error.text || String(error)));
}

document.addEventListener("DOMContentLoaded", init);
