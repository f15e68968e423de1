// The ketch web page: plain JavaScript, no dependencies. The server authenticates the
// page by an HttpOnly cookie (set by opening the URL `ketch serve` printed); every call
// here is same-origin, so the cookie goes with it, EventSource included.
"use strict";

const $ = (id) => document.getElementById(id);
let current = null;      // the open session's id
let source = null;       // its EventSource
let running = false;
let main = null;         // the transcript's view

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

async function api(method, path, body) {
  const init = { method, headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.error || `${response.status} ${response.statusText}`);
  return data;
}

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

// -- sessions list -------------------------------------------------------------------------
async function loadSessions() {
  const data = await api("GET", "/api/sessions");
  const list = $("sessions");
  list.replaceChildren();
  for (const info of data.sessions) {
    const item = el("li");
    item.dataset.id = info.id;
    item.dataset.testid = "session-item";
    item.setAttribute("data-testid", "session-item");
    if (info.id === current) item.classList.add("current");
    item.append(el("div", "name", info.title || "(no prompt yet)"));
    item.append(el("div", "meta", `${info.message_count} messages · $${Number(info.cost).toFixed(4)}${info.running ? " · running" : ""}`));
    item.addEventListener("click", () => openSession(info.id));
    list.append(item);
  }
}

// -- rendering -----------------------------------------------------------------------------
// A View is a container of messages: the transcript, or a subagent's panel inside a tool call.
class View {
  constructor(root) {
    this.root = root;
    this.streaming = null;   // {node, blocks: {index: {kind, text node}}}
    this.calls = new Map();  // tool_call_id -> {node, body, result, subs: Map(path -> View)}
  }

  userMessage(message) {
    const node = el("div", "msg user");
    node.setAttribute("data-testid", "user-message");
    node.append(el("div", "role", "you"), el("div", "text", textOf(message.content)));
    this.root.append(node);
  }

  startAssistant() {
    const node = el("div", "msg assistant");
    node.setAttribute("data-testid", "assistant-message");
    node.append(el("div", "role", "assistant"));
    this.root.append(node);
    this.streaming = { node, blocks: new Map() };
    return this.streaming;
  }

  delta(event) {
    const s = this.streaming || this.startAssistant();
    const kind = event.type.split("_")[0];
    if (kind !== "text" && kind !== "thinking") return;
    let block = s.blocks.get(event.index);
    if (!block) {
      block = this.block(s.node, kind, "");
      s.blocks.set(event.index, block);
    }
    if (event.type.endsWith("_delta")) block.textContent += event.delta || "";
    else if (event.type.endsWith("_end") && typeof event.content === "string") block.textContent = event.content;
  }

  block(parent, kind, text) {
    if (kind === "thinking") {
      const details = el("details", "thinking");
      details.setAttribute("data-testid", "thinking");
      details.append(el("summary", null, "thinking"));
      const body = el("div", "text", text);
      details.append(body);
      parent.append(details);
      return body;
    }
    const body = el("div", "text", text);
    body.setAttribute("data-testid", "assistant-text");
    parent.append(body);
    return body;
  }

  assistantMessage(message) {
    let node;
    if (this.streaming) {
      node = this.streaming.node;
      node.replaceChildren(el("div", "role", "assistant"));
      this.streaming = null;
    } else {
      node = this.startAssistant().node;
      this.streaming = null;
    }
    for (const block of message.content || []) {
      if (block.type === "text" && block.text) this.block(node, "text", block.text);
      else if (block.type === "thinking") this.block(node, "thinking", block.thinking || "");
      else if (block.type === "tool_call") this.toolCall(node, block);
    }
    if (message.stop_reason === "error" || message.stop_reason === "aborted") {
      node.append(el("div", "note", `(${message.stop_reason}${message.error_message ? ": " + message.error_message : ""})`));
    }
  }

  toolCall(parent, call) {
    const node = el("details", "tool");
    node.setAttribute("data-testid", "tool-call");
    node.dataset.callId = call.id;
    node.dataset.tool = call.name;
    node.open = true;
    node.append(el("summary", null, `→ ${call.name} ${mainArgument(call.args)}`));
    const args = el("pre", "args", JSON.stringify(call.args, null, 2));
    args.setAttribute("data-testid", "tool-args");
    node.append(args);
    const subs = el("div", "subs");
    node.append(subs);
    parent.append(node);
    this.calls.set(call.id, { node, subs, subViews: new Map(), result: null });
  }

  toolResult(id, name, text, isError) {
    const call = this.calls.get(id);
    if (!call) return;
    call.node.classList.remove("running");
    if (isError) call.node.classList.add("error");
    if (call.result) call.result.remove();
    const pre = el("pre", "result");
    pre.setAttribute("data-testid", "tool-result");
    if (looksLikeDiff(name, text)) {
      pre.classList.add("diff");
      for (const line of text.split("\n")) {
        const cls = line.startsWith("+") && !line.startsWith("+++") ? "add"
          : line.startsWith("-") && !line.startsWith("---") ? "del"
          : line.startsWith("@@") ? "hunk" : "";
        pre.append(el("span", cls, line + "\n"));
      }
    } else {
      pre.textContent = text;
    }
    call.result = pre;
    call.node.append(pre);
  }

  subagent(id, path, event) {
    const call = this.calls.get(id);
    if (!call) return;
    let view = call.subViews.get(path);
    if (!view) {
      const box = el("div", "subagent");
      box.setAttribute("data-testid", "subagent");
      box.dataset.path = path;
      box.append(el("div", "path", path));
      call.subs.append(box);
      view = new View(box);
      call.subViews.set(path, view);
    }
    view.handle(event);
  }

  note(text) {
    this.root.append(el("div", "note", text));
  }

  // One event (the stream-json shape, or the plain one for nested subagent events).
  handle(ev) {
    switch (ev.type) {
      case "message_start":
        if (ev.message && ev.message.role === "assistant") this.startAssistant();
        break;
      case "message_update":
        this.delta(ev.event || {});
        break;
      case "message_end": {
        const m = ev.message || {};
        if (m.role === "assistant") this.assistantMessage(m);
        else if (m.role === "user") this.userMessage(m);
        else if (m.role === "tool_result") {
          const call = this.calls.get(m.tool_call_id);
          if (call && !call.result) this.toolResult(m.tool_call_id, m.tool_name, textOf(m.content), m.is_error);
        } else if (m.role === "context_summary") this.note(`(summary of the earlier conversation)`);
        break;
      }
      case "tool_execution_start": {
        const call = this.calls.get(ev.tool_call_id);
        if (call) call.node.classList.add("running");
        break;
      }
      case "tool_execution_update": {
        const p = ev.partial;
        if (p && p.type === "subagent_event") this.subagent(ev.tool_call_id, p.path, p.event);
        break;
      }
      case "tool_execution_end":
        this.toolResult(ev.tool_call_id, ev.tool_name, textOf((ev.result || {}).content), ev.is_error);
        break;
      case "compaction_end":
        this.note(ev.error ? `compaction failed: ${ev.error}` : `context compacted: ${ev.tokens_before} → ${ev.tokens_after} tokens`);
        break;
      case "agent_end": {
        const reason = (ev.summary || {}).end_reason;
        if (reason && reason !== "stop") this.note(`run ended: ${reason}${ev.summary.error ? " — " + ev.summary.error : ""}`);
        break;
      }
      default:
        break;
    }
  }

  // A whole transcript (message_to_dict dicts).
  load(messages) {
    for (const m of messages) {
      if (m.role === "user") this.userMessage(m);
      else if (m.role === "assistant") this.assistantMessage(m);
      else if (m.role === "tool_result") this.toolResult(m.tool_call_id, m.tool_name, textOf(m.content), m.is_error);
      else if (m.role === "context_summary") this.note("(summary of the earlier conversation)");
      else this.note(`${m.role}: ${textOf(m.content)}`);
    }
  }
}

function textOf(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.filter((b) => b && b.type === "text").map((b) => b.text).join("");
}

function mainArgument(args) {
  if (!args || typeof args !== "object") return "";
  for (const key of ["command", "pattern", "path", "file_path", "query", "url", "task"]) {
    if (typeof args[key] === "string" && args[key].trim()) return args[key].split("\n")[0].slice(0, 80);
  }
  return "";
}

function looksLikeDiff(name, text) {
  return (name === "edit" || name === "write") && /^(---|\+\+\+|@@)/m.test(text);
}

// -- session state ---------------------------------------------------------------------------
function setRunning(value, pending) {
  running = value;
  const status = $("status");
  status.textContent = running ? "running" : pending ? "waiting for approval" : "idle";
  status.className = "status" + (running ? " running" : pending ? " paused" : "");
  $("abort").hidden = !running;
  $("follow-up").hidden = !running;
  $("send").textContent = running ? "Steer" : "Send";
}

function applyState(state) {
  const pending = state.pending_approvals || [];
  setRunning(!!state.running, pending.length > 0);
  if (state.title !== undefined) $("title").textContent = state.title || state.id;
  if (state.model && document.activeElement !== $("model")) $("model").value = state.model;
  const ctx = state.context || { tokens: 0, window: 0 };
  $("ctx").textContent = `${ctx.tokens} / ${ctx.window}`;
  $("ctx-meter").value = ctx.window ? Math.min(1, ctx.tokens / ctx.window) : 0;
  $("cost").textContent = `$${Number(state.cost || 0).toFixed(4)}`;
  renderApprovals(pending);
}

function renderApprovals(pending) {
  const box = $("approvals");
  box.replaceChildren();
  box.hidden = pending.length === 0;
  for (const call of pending) {
    const row = el("div", "approval");
    row.setAttribute("data-testid", "approval");
    row.dataset.callId = call.tool_call_id;
    row.append(el("strong", null, call.tool_name), el("code", null, JSON.stringify(call.args)));
    if (call.reason) row.append(el("span", "note", call.reason));
    if (call.decided) {
      row.append(el("span", "note", "decided"));
    } else {
      const yes = el("button", null, "Approve");
      yes.type = "button";
      yes.setAttribute("data-testid", "approve");
      yes.addEventListener("click", () => decide(call.tool_call_id, "approve"));
      const no = el("button", null, "Deny");
      no.type = "button";
      no.setAttribute("data-testid", "deny");
      no.addEventListener("click", () => decide(call.tool_call_id, "deny"));
      row.append(yes, no);
    }
    box.append(row);
  }
}

async function decide(callId, decision) {
  try {
    await api("POST", `/api/sessions/${current}/approvals`, { decisions: { [callId]: { decision } } });
    showError("");
  } catch (err) {
    showError(err.message);
  }
}

function onEvent(ev) {
  if (ev.type === "session_state") {
    applyState(ev);
    loadSessions().catch(() => {});
    return;
  }
  if (ev.type === "run_error") {
    showError(ev.error);
    return;
  }
  if (ev.type === "agent_start") {
    setRunning(true, false);
    renderApprovals([]);
  }
  main.handle(ev);
  const t = $("transcript");
  t.scrollTop = t.scrollHeight;
}

async function openSession(id) {
  if (source) source.close();
  current = id;
  location.hash = `session=${id}`;
  showError("");
  const state = await api("GET", `/api/sessions/${id}`);
  const transcript = $("transcript");
  transcript.replaceChildren();
  main = new View(transcript);
  main.load(state.messages || []);
  applyState(state);
  if (state.writable === false) {
    showError(state.error || "this session is open elsewhere (read-only)");
  } else {
    source = new EventSource(`/api/sessions/${id}/events?last_event_id=${encodeURIComponent(state.last_event_id)}`);
    source.onmessage = (e) => onEvent(JSON.parse(e.data));
    source.addEventListener("reset", () => openSession(id));
  }
  document.body.dataset.session = id;
  await loadSessions();
}

// -- commands --------------------------------------------------------------------------------
async function send(kind) {
  const input = $("input");
  const text = input.value;
  if (!text.trim() || !current) return;
  const route = kind || (running ? "steer" : "prompt");
  try {
    await api("POST", `/api/sessions/${current}/${route}`, { text });
    input.value = "";
    showError("");
    if (route !== "prompt") main.note(`(${route === "steer" ? "steering" : "follow-up queued"}: ${text})`);
  } catch (err) {
    showError(err.message);
  }
}

async function newSession() {
  try {
    const state = await api("POST", "/api/sessions", {});
    await openSession(state.id);
  } catch (err) {
    showError(err.message);
  }
}

function start() {
  $("new-session").addEventListener("click", newSession);
  $("composer").addEventListener("submit", (e) => { e.preventDefault(); send(); });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); send(); }
  });
  $("follow-up").addEventListener("click", () => send("follow_up"));
  $("abort").addEventListener("click", async () => {
    try { await api("POST", `/api/sessions/${current}/abort`, {}); } catch (err) { showError(err.message); }
  });
  $("model-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!current) return;
    try {
      await api("POST", `/api/sessions/${current}/model`, { model: $("model").value });
      showError("");
    } catch (err) {
      showError(err.message);
    }
  });
  const wanted = /session=([0-9a-zA-Z_-]+)/.exec(location.hash);
  loadSessions()
    .then(() => (wanted ? openSession(wanted[1]) : null))
    .catch((err) => showError(err.message))
    .finally(() => { document.body.dataset.ready = "1"; });
}

document.addEventListener("DOMContentLoaded", start);
