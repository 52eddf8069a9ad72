// The grammar workbench's page: every change goes through the JSON API (/api/...), with the per-run token.
// Untrusted text (grammars, samples, messages) is only ever set as text, never as HTML; the view's page is
// shown in a sandboxed frame.
"use strict";

const TOKEN = document.querySelector('meta[name="workbench-token"]').content;
const MARKS = { pass: "✓", differs: "≠", error: "✗", no_expected: "○", unchecked: "·" };
const $ = (id) => document.getElementById(id);
const state = { offset: 0, limit: 100, only: null, selected: null, grammar: null };

async function api(method, path, body) {
  const init = { method, headers: { "X-Workbench-Token": TOKEN } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch("/api/" + path, init);
  const data = await response.json();
  if (!response.ok) {
    const error = new Error(data.detail || data.title || response.statusText);
    error.code = data.code;
    throw error;
  }
  return data;
}

function say(text, bad) {
  const status = $("status");
  status.textContent = text;
  status.className = bad ? "bad" : "";
}

function debounce(fn, ms) {
  let timer = null;
  return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms); };
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = text;
  if (className) node.className = className;
  return node;
}

function json(value) { return JSON.stringify(value, null, 2); }

// A path inside the working directory, shown relative to it.
function shown(path) {
  const root = state.root ? state.root + "/" : null;
  return path && root && path.startsWith(root) ? path.slice(root.length) : path;
}

// ---------------------------------------------------------------- the grammar
function renderGutter() {
  const source = $("source");
  const lines = source.value.split("\n").length;
  const bad = new Set((state.grammar ? state.grammar.errors : []).map((e) => e.line).filter((n) => n));
  const gutter = $("gutter");
  gutter.replaceChildren(...Array.from({ length: lines }, (_, i) => {
    const line = el("span", String(i + 1) + "\n", bad.has(i + 1) ? "err" : "");
    return line;
  }));
  gutter.scrollTop = source.scrollTop;
}

function renderGrammar(grammar, replaceText) {
  state.grammar = grammar;
  if (replaceText) $("source").value = grammar.source;
  $("kind").value = grammar.kind;
  $("grammar-name").textContent = grammar.name;
  $("grammar-path").textContent = shown(grammar.path) || "(not saved yet)";
  $("read-only").hidden = !grammar.read_only;
  $("note").textContent = grammar.note || "";
  const status = $("compile-status");
  status.textContent = grammar.compiled ? "compiles: " + Object.keys(grammar.fields).join(", ") : "does not compile";
  status.className = grammar.compiled ? "good" : "bad";
  const list = $("errors");
  list.replaceChildren(...grammar.errors.map((error) => {
    const item = el("li");
    item.append(el("span", error.code, "code"), " ");
    const where = error.line ? `line ${error.line}, column ${error.column || 1}${error.guessed ? " (where it is named)" : ""}: `
      : error.path ? error.path + ": " : "";
    item.append(el("span", where, "where"), el("span", error.message, "message"));
    if (error.hint) item.append(el("span", error.hint, "hint"));
    item.dataset.line = error.line || "";
    item.dataset.column = error.column || "";
    item.addEventListener("click", () => goTo(error.line, error.column));
    return item;
  }));
  renderGutter();
}

function goTo(line, column) {
  if (!line) return;
  const source = $("source");
  const lines = source.value.split("\n");
  let at = 0;
  for (let i = 0; i < line - 1 && i < lines.length; i++) at += lines[i].length + 1;
  at += Math.max(0, (column || 1) - 1);
  source.focus();
  source.setSelectionRange(at, at + 1);
}

let grammarSent = 0;  // (answers can overtake each other: only the latest edit's is shown)
const sendGrammar = debounce(async () => {
  const sent = ++grammarSent;
  try {
    const data = await api("POST", "grammar", { source: $("source").value, kind: $("kind").value,
      offset: state.offset, limit: state.limit });
    if (sent !== grammarSent) return;
    applyState(data, false);
    say(data.grammar.compiled ? "compiled; samples checked again" : "the grammar does not compile", !data.grammar.compiled);
  } catch (error) { say(error.message, true); }
}, 400);

// ---------------------------------------------------------------- the samples
function applyState(data, replaceText) {
  state.root = data.root;
  renderGrammar(data.grammar, replaceText);
  renderSamples(data.samples);
  const names = $("builtins");
  if (!names.childElementCount) names.replaceChildren(...data.builtins.map((n) => { const o = el("option"); o.value = n; return o; }));
  if (state.selected !== null) loadResult();
}

function renderSamples(samples) {
  $("samples-source").textContent = shown(samples.folder || samples.source) + (samples.truncated ? " (more than the limit: cut)" : "");
  const counts = $("counts");
  counts.replaceChildren(...Object.entries(samples.counts).filter(([, n]) => n).map(([name, n]) => {
    const button = el("button", `${MARKS[name]} ${name.replace("_", " ")} ${n}`, state.only === name ? "active" : "");
    button.type = "button";
    button.dataset.status = name;
    button.addEventListener("click", () => { state.only = state.only === name ? null : name; state.offset = 0; refresh(); });
    return button;
  }));
  $("samples").replaceChildren(...samples.items.map((sample) => {
    const item = el("li", null, "sample status-" + sample.status + (sample.id === state.selected ? " selected" : ""));
    item.dataset.id = sample.id;
    item.dataset.status = sample.status;
    item.title = sample.problem || `${sample.chars} characters, ${sample.origin}`;
    item.append(el("span", MARKS[sample.status], "mark"), " ", el("span", sample.name + (sample.edited ? " *" : "")));
    item.addEventListener("click", () => select(sample.id));
    return item;
  }));
  const last = Math.min(samples.offset + samples.limit, samples.total);
  $("page").textContent = samples.total ? `${samples.offset + 1}–${last} of ${samples.total}` : "no samples";
  $("prev").disabled = samples.offset === 0;
  $("next").disabled = last >= samples.total;
}

async function refresh() {
  const query = `offset=${state.offset}&limit=${state.limit}` + (state.only ? `&status=${state.only}` : "");
  try { applyState(await api("GET", "state?" + query), false); } catch (error) { say(error.message, true); }
}

async function select(id) {
  state.selected = id;
  document.querySelectorAll("#samples li").forEach((li) => li.classList.toggle("selected", Number(li.dataset.id) === id));
  try {
    const sample = await api("GET", "samples/" + id);
    $("sample-text").value = sample.text;
    $("sample-prefix").value = sample.prefix;
    $("sample-tools").value = sample.tools === null ? "" : json(sample.tools);
    $("sample-problem").textContent = sample.problem || "";
  } catch (error) { say(error.message, true); }
  loadResult();
}

const sendSample = debounce(async () => {
  if (state.selected === null) return;
  const body = { text: $("sample-text").value, prefix: $("sample-prefix").value };
  const tools = $("sample-tools").value.trim();
  try {
    body.tools = tools ? JSON.parse(tools) : null;
  } catch (error) { say("the tools are not JSON: " + error.message, true); return; }
  try {
    await api("PUT", "samples/" + state.selected, body);
    await refresh();
  } catch (error) { say(error.message, true); }
}, 400);

// ---------------------------------------------------------------- the result
let resultAsked = 0;
async function loadResult() {
  if (state.selected === null) return;
  const asked = ++resultAsked;
  const stale = Boolean(state.grammar && !state.grammar.compiled);
  $("result-pane").classList.toggle("stale", stale);  // (what shows is the last grammar's that compiled)
  if (stale) {  // (nothing to parse with: the load errors say why)
    $("result-status").textContent = "· the grammar does not compile";
    $("result-status").className = "mark status-unchecked";
    return;
  }
  const chunk = Math.max(1, Number($("chunk").value) || 8);
  try {
    const result = await api("GET", `result/${state.selected}?chunk=${chunk}`);
    if (asked === resultAsked) renderResult(result);
  } catch (error) {
    $("result-status").textContent = "";
    say(error.message, true);
  }
}

function markDifference(pre, value, path) {
  pre.textContent = json(value);
  if (!path) return;
  const key = path.split(/[.[\]]/).filter(Boolean).pop();
  const text = pre.textContent;
  const at = text.indexOf(`"${key}"`);
  if (at < 0) return;
  const end = text.indexOf("\n", at);
  pre.replaceChildren(text.slice(0, at), el("mark", text.slice(at, end < 0 ? undefined : end), "diff"),
    end < 0 ? "" : text.slice(end));
}

function renderResult(result) {
  $("result-name").textContent = result.name;
  const mark = $("result-status");
  mark.textContent = MARKS[result.status] + " " + result.status.replace("_", " ");
  mark.className = "mark status-" + result.status;
  $("view").srcdoc = result.html;
  const expectedDiff = result.expected_difference;
  markDifference($("message"), result.message, expectedDiff && expectedDiff.path);
  $("expected").textContent = result.has_expected ? json(result.expected) : "(no expected .json)";
  $("expected-diff").textContent = !result.has_expected ? "no expected message: write one from this parse"
    : expectedDiff ? `differs from the expected message first at ${expectedDiff.path}` : "equals the expected message";
  $("expected-diff").className = result.has_expected && !expectedDiff ? "good" : expectedDiff ? "bad" : "muted";
  const stream = result.stream;
  $("stream-same").textContent = stream.same
    ? `streamed in ${stream.chunks} chunks of ${stream.chunk}: the same message as one-shot`
    : `streamed in ${stream.chunks} chunks of ${stream.chunk}: differs from one-shot first at ${stream.difference.path}`;
  $("stream-same").className = stream.same ? "good" : "bad";
  markDifference($("stream-oneshot"), result.message, stream.difference && stream.difference.path);
  markDifference($("stream-streamed"), stream.message, stream.difference && stream.difference.path);
  $("event-count").textContent = `${result.event_count} events` + (result.event_count > result.events.length ? ` (first ${result.events.length} shown)` : "");
  $("events").replaceChildren(...result.events.map((event) => el("li", JSON.stringify(event), "ev-" + event.type)));
  $("delta-count").textContent = `${result.delta_count} deltas, finish_reason ${result.finish_reason}`;
  $("deltas").replaceChildren(...result.deltas.map((delta) => el("li", JSON.stringify(delta))));
  $("failure").textContent = result.failure ? "strict parse: " + json(result.failure) : "strict parse: no error";
  $("lenient-errors").replaceChildren(...result.lenient.errors.map((error) =>
    el("li", `${error.code} in ${error.field || "-"} at ${JSON.stringify(error.span)}: ${error.message}`)));
  if (!result.lenient.errors.length) $("lenient-errors").replaceChildren(el("li", "lenient parse: no errors", "good"));
  renderExports(result.exports, result.warnings);
}

function renderExports(exports, warnings) {
  const box = $("exports");
  box.replaceChildren(el("p", `exported with ${exports.tools}`, "muted"));
  for (const engine of ["llguidance", "xgrammar"]) {
    const found = exports[engine];
    box.append(el("h3", engine + ": " + (found.ok ? `ok (${found.chars} characters)` : "does not export")));
    box.append(el("pre", found.ok ? found.preview : `${found.code}: ${found.message}`, found.ok ? "" : "bad"));
  }
  for (const warning of warnings) box.append(el("p", "warning: " + warning, "bad"));
}

// ---------------------------------------------------------------- actions
async function save(path) {
  try {
    const saved = await api("POST", "save", path ? { path } : {});
    say(`saved ${saved.chars} characters to ${shown(saved.path)}`);
    await refresh();
  } catch (error) { say(error.message, true); }
}

async function start() {
  const kind = $("start-kind").value;
  const body = { from: kind, offset: state.offset, limit: state.limit };
  if (kind === "builtin") body.name = $("start-name").value || "qwen3";
  try {
    applyState(await api("POST", "start", body), true);
    say("started from " + (kind === "builtin" ? body.name : kind.replace("_", " ")));
  } catch (error) { say(error.message, true); }
}

async function writeGolden() {
  if (state.selected === null) return;
  try {
    const done = await api("POST", "golden/" + state.selected, {});
    const written = done.written.map(shown).join(", ");
    $("golden-status").textContent = "wrote " + written;
    say("wrote " + written);
    await refresh();
  } catch (error) { say(error.message, true); }
}

async function showRegistration() {
  try {
    const found = await api("GET", "register");
    const body = $("register-body");
    body.replaceChildren(el("p", `parser name: ${found.parser}` + (found.saved ? "" : " (save the grammar first: the engines load its file)")));
    if (found.note) body.append(el("p", found.note, "bad"));
    for (const engine of ["vllm", "sglang"]) {
      body.append(el("h3", engine === "vllm" ? "vLLM" : "SGLang"));
      for (const [part, text] of Object.entries(found[engine])) {
        body.append(el("p", part.replace("_", " "), "muted"), el("pre", text));
      }
    }
    $("register-dialog").showModal();
  } catch (error) { say(error.message, true); }
}

async function paste() {
  const text = $("paste-text").value;
  if (!text) return;
  try {
    const sample = await api("POST", "samples", { text, prefix: $("paste-prefix").value });
    $("paste-text").value = "";
    await refresh();
    select(sample.id);
  } catch (error) { say(error.message, true); }
}

function showTab(name) {
  document.querySelectorAll("#tabs button").forEach((b) => b.classList.toggle("active", b.dataset.tab === name));
  document.querySelectorAll(".tab").forEach((t) => { t.hidden = t.id !== "tab-" + name; });
}

function wire() {
  const source = $("source");
  source.addEventListener("input", () => { renderGutter(); sendGrammar(); });
  source.addEventListener("scroll", () => { $("gutter").scrollTop = source.scrollTop; });
  source.addEventListener("keydown", (event) => {  // (Tab indents, as in an editor, instead of leaving the pane)
    if (event.key !== "Tab" || event.shiftKey || event.ctrlKey || event.altKey || event.metaKey) return;
    event.preventDefault();
    const start = source.selectionStart;
    source.setRangeText("    ", start, source.selectionEnd, "end");
    renderGutter();
    sendGrammar();
  });
  $("kind").addEventListener("change", sendGrammar);
  for (const id of ["sample-text", "sample-prefix", "sample-tools"]) $(id).addEventListener("input", sendSample);
  $("chunk").addEventListener("input", debounce(loadResult, 300));
  $("save").addEventListener("click", () => save(null));
  $("save-as").addEventListener("click", () => save($("save-path").value));
  $("start").addEventListener("click", start);
  $("golden").addEventListener("click", writeGolden);
  $("register").addEventListener("click", showRegistration);
  $("paste-add").addEventListener("click", paste);
  $("prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - state.limit); refresh(); });
  $("next").addEventListener("click", () => { state.offset += state.limit; refresh(); });
  document.querySelectorAll("#tabs button").forEach((b) => b.addEventListener("click", () => showTab(b.dataset.tab)));
}

async function main() {
  wire();
  try {
    const data = await api("GET", `state?offset=0&limit=${state.limit}`);
    applyState(data, true);
    if (data.samples.items.length) select(data.samples.items[0].id);
    say("ready");
  } catch (error) { say(error.message, true); }
}

main();
