// The ketch web page: plain JavaScript; markdown by the vendored marked, DOMPurify and
// highlight.js (static/vendor/, their licenses beside them). The server authenticates the
// page by an HttpOnly cookie (set by opening the URL `ketch serve` printed); every call
// here is same-origin, so the cookie goes with it, EventSource included.
"use strict";

const $ = (id) => document.getElementById(id);
let current = null;      // the open session's id
let source = null;       // its EventSource
let running = false;
let main = null;         // the transcript's view
let commands = [];       // the session's custom slash commands ({name, usage, description, origin})

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
  if (response.status === 401) {
    throw new Error("Not signed in: the server's token changed (was it restarted?). Open the URL `ketch serve` printed.");
  }
  if (!response.ok) throw new Error(data.error || `${response.status} ${response.statusText}`);
  return data;
}

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

// -- sessions list -------------------------------------------------------------------------
// The list shows a page of sessions (More loads the next), filtered by the search box; each
// can be renamed or deleted, and one waiting for approval is marked.
let nextCursor = null;

async function loadSessions(more) {
  const query = $("search").value.trim();
  const params = new URLSearchParams({ limit: "50" });
  if (query) params.set("q", query);
  if (more && nextCursor) params.set("cursor", nextCursor);
  const data = await api("GET", `/api/sessions?${params}`);
  const list = $("sessions");
  if (!more) list.replaceChildren();
  for (const info of data.sessions) list.append(sessionItem(info));
  nextCursor = data.next_cursor || null;
  $("more-sessions").hidden = !nextCursor;
}

function sessionItem(info) {
  const item = el("li");
  item.dataset.id = info.id;
  item.setAttribute("data-testid", "session-item");
  if (info.id === current) item.classList.add("current");
  if (info.waiting) item.classList.add("waiting");
  const name = el("div", "name", info.title || "(no prompt yet)");
  const state = info.waiting ? " · waiting for approval" : info.running ? " · running" : "";
  const meta = el("div", "meta", `${info.message_count} messages · $${Number(info.cost).toFixed(4)}${state}`);
  const rename = el("button", "icon", "✎");
  rename.type = "button";
  rename.title = "Rename";
  rename.setAttribute("data-testid", "rename-session");
  rename.addEventListener("click", (e) => { e.stopPropagation(); renameSession(item, info); });
  const remove = el("button", "icon", "✕");
  remove.type = "button";
  remove.title = "Delete";
  remove.setAttribute("data-testid", "delete-session");
  remove.addEventListener("click", (e) => { e.stopPropagation(); deleteSession(info.id, item); });
  const actions = el("span", "actions");
  actions.append(rename, remove);
  item.append(actions, name, meta);
  item.addEventListener("click", () => openSession(info.id).catch((err) => showError(err.message)));
  return item;
}

function renameSession(item, info) {
  const input = el("input", "rename");
  input.value = info.title || "";
  input.setAttribute("data-testid", "rename-input");
  input.setAttribute("aria-label", "session title");
  item.querySelector(".name").replaceWith(input);
  input.focus();
  input.addEventListener("click", (e) => e.stopPropagation());
  input.addEventListener("keydown", async (e) => {
    if (e.key === "Escape") { loadSessions().catch(() => {}); return; }
    if (e.key !== "Enter") return;
    e.preventDefault();
    try {
      const data = await api("POST", `/api/sessions/${info.id}/title`, { title: input.value });
      if (info.id === current) $("title").textContent = data.title || info.id;
      await loadSessions();
    } catch (err) {
      showError(err.message);
    }
  });
}

async function deleteSession(id, item) {
  try {
    await api("DELETE", `/api/sessions/${id}`);
    item.remove();
    if (id === current) blankSession();
  } catch (err) {
    showError(err.message);
  }
}

// -- markdown ------------------------------------------------------------------------------
// Model and tool text is markdown: parsed by marked with raw HTML shown as text, then
// sanitized by DOMPurify (a second line: nothing the model writes can execute), code
// highlighted by highlight.js with a copy button.
let markdown = null;

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function markdownParser() {
  if (markdown === null) {
    markdown = window.marked && window.DOMPurify
      ? new window.marked.Marked({ gfm: true, async: false, renderer: { html: (token) => escapeHtml(token.text || token.raw || "") } })
      : false;
  }
  return markdown;
}

// A sanitized fragment of `src` rendered as markdown (plain text when the libraries are missing).
function renderMarkdown(src) {
  const parser = markdownParser();
  if (!parser) return document.createTextNode(src);
  const html = parser.parse(src).trim();
  const fragment = window.DOMPurify.sanitize(html, {
    RETURN_DOM_FRAGMENT: true,
    FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed", "svg", "math"],
    FORBID_ATTR: ["style"],
  });
  for (const link of fragment.querySelectorAll("a[href]")) {
    link.target = "_blank";
    link.rel = "noopener noreferrer";
  }
  for (const code of fragment.querySelectorAll("pre > code")) decorateCode(code);
  return fragment;
}

function decorateCode(code) {
  const match = /(?:^|\s)language-([\w+#-]+)/.exec(code.className);
  if (match && window.hljs && window.hljs.getLanguage(match[1])) {
    try { window.hljs.highlightElement(code); } catch (err) { /* leave it plain */ }
  }
  const copy = el("button", "copy", "Copy");
  copy.type = "button";
  copy.setAttribute("data-testid", "copy-code");
  copy.addEventListener("click", () => {
    const done = () => { copy.textContent = "Copied"; };
    if (navigator.clipboard) navigator.clipboard.writeText(code.textContent).then(done, () => { copy.textContent = "Copy failed"; });
  });
  code.parentNode.insertBefore(copy, code);
}

// Where `text` can be cut so the part before it renders the same on its own: after the last
// blank line outside a code fence (or, in a long paragraph, after its last line outside a fence).
const FENCE = /^ {0,3}(`{3,}|~{3,})/;
function safeCut(text) {
  let cut = 0;
  let line = 0;
  let fence = null;
  let lastLine = 0;
  let blank = false;
  while (line < text.length) {
    let end = text.indexOf("\n", line);
    if (end < 0) break;  // an unfinished line stays
    const content = text.slice(line, end);
    const marker = FENCE.exec(content);
    if (fence === null) {
      if (marker) fence = marker[1];
      else if (!content.trim()) { if (!blank) cut = end + 1; blank = true; }
      else blank = false;
      if (fence === null) lastLine = end + 1;
    } else if (marker && marker[1][0] === fence[0] && marker[1].length >= fence.length && !content.slice(marker[0].length).trim()) {
      fence = null;
      lastLine = end + 1;
    }
    line = end + 1;
  }
  if (cut === 0 && fence === null && text.length > 4096) cut = lastLine;
  return cut;
}

// A text or thinking block being streamed. A delta only appends to a string; once per frame
// the finished part (up to a safe cut) is rendered once into its own element and only the
// unfinished tail is rendered again, so a chunk costs what the tail holds, never what is shown.
const dirty = new Set();
let frame = 0;
let stick = true;  // keep the transcript scrolled to the end

class Stream {
  constructor(body) {
    this.body = body;
    this.parts = [];
    this.tail = "";
    this.pending = "";
    this.live = el("div", "md-live");
    body.append(this.live);
  }

  append(delta) {
    if (!delta) return;
    this.parts.push(delta);
    this.pending += delta;
    dirty.add(this);
    if (!frame) frame = requestAnimationFrame(flushRendering);
  }

  text() {
    return this.parts.join("");
  }

  flush() {
    if (!this.pending) return;
    let tail = this.tail + this.pending;
    this.pending = "";
    const cut = safeCut(tail);
    if (cut > 0) {
      const chunk = el("div", "md-chunk");
      chunk.append(renderMarkdown(tail.slice(0, cut)));
      this.body.insertBefore(chunk, this.live);
      tail = tail.slice(cut);
    }
    this.tail = tail;
    this.live.replaceChildren(renderMarkdown(tail));
  }
}

// Render what the streams received since the last frame (tests call it to render now).
function flushRendering() {
  if (frame) cancelAnimationFrame(frame);
  frame = 0;
  for (const stream of dirty) stream.flush();
  dirty.clear();
  const t = document.getElementById("transcript");
  if (stick && t) t.scrollTop = t.scrollHeight;
}

// -- rendering -----------------------------------------------------------------------------
const LONG_RESULT = 30;  // a tool result of more lines starts collapsed
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
    this.streaming = { node, blocks: new Map() };  // index -> Stream
    return this.streaming;
  }

  delta(event) {
    const s = this.streaming || this.startAssistant();
    const kind = event.type.split("_")[0];
    if (kind !== "text" && kind !== "thinking") return;
    this.streamBlock(s, event.index, kind);
    if (event.type.endsWith("_delta")) s.blocks.get(event.index).append(event.delta || "");
  }

  streamBlock(s, index, kind) {
    let stream = s.blocks.get(index);
    if (!stream) {
      stream = new Stream(this.block(s.node, kind, null));
      stream.kind = kind;
      s.blocks.set(index, stream);
    }
    return stream;
  }

  // The message being streamed as the session state shows it (a reload mid-answer).
  resume(message) {
    const s = this.startAssistant();
    (message.content || []).forEach((block, index) => {
      if (block.type === "text") this.streamBlock(s, index, "text").append(block.text || "");
      else if (block.type === "thinking") this.streamBlock(s, index, "thinking").append(block.thinking || "");
      else if (block.type === "tool_call") this.toolCall(s.node, block);
    });
  }

  // A block's element, its markdown rendered (`text` null: empty, for a stream to fill).
  block(parent, kind, text) {
    const body = el("div", "text md");
    if (text !== null) body.append(renderMarkdown(text));
    if (kind === "thinking") {
      const details = el("details", "thinking");
      details.setAttribute("data-testid", "thinking");
      details.append(el("summary", null, "thinking"), body);
      parent.append(details);
      return body;
    }
    body.setAttribute("data-testid", "assistant-text");
    parent.append(body);
    return body;
  }

  assistantMessage(message) {
    let node;
    const content = message.content || [];
    if (this.streaming) {
      const s = this.streaming;
      this.streaming = null;
      node = s.node;
      // what streamed stays on the page (rendered, not rebuilt) when it is what the message says
      const same = content.every((block, index) => {
        const stream = s.blocks.get(index);
        if (block.type === "text") return block.text ? stream && stream.kind === "text" && stream.text() === block.text : !stream;
        if (block.type === "thinking") return stream && stream.kind === "thinking" && stream.text() === (block.thinking || "");
        return !stream;
      }) && [...s.blocks.keys()].every((index) => index < content.length);
      if (same) {
        for (const stream of s.blocks.values()) { stream.flush(); dirty.delete(stream); }
        for (const shown of node.querySelectorAll(":scope > [data-testid=tool-call]")) shown.remove();
        for (const block of content) if (block.type === "tool_call") this.toolCall(node, block);
        this.endNote(node, message);
        return;
      }
      for (const stream of s.blocks.values()) dirty.delete(stream);
      node.replaceChildren(el("div", "role", "assistant"));
    } else {
      node = this.startAssistant().node;
      this.streaming = null;
    }
    for (const block of content) {
      if (block.type === "text" && block.text) this.block(node, "text", block.text);
      else if (block.type === "thinking") this.block(node, "thinking", block.thinking || "");
      else if (block.type === "tool_call") this.toolCall(node, block);
    }
    this.endNote(node, message);
  }

  endNote(node, message) {
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
    this.calls.set(call.id, { node, subs, subViews: new Map(), result: null, args: call.args || {} });
  }

  toolResult(id, name, text, isError) {
    const call = this.calls.get(id);
    if (!call) return;
    const args = call.args || {};
    if (name === "write" && !isError && !looksLikeDiff(name, text) && typeof args.content === "string") {
      // a new file: all of its lines are added
      text = `${text}\n+++ ${args.path || args.file_path || ""}\n` + args.content.replace(/\n$/, "").split("\n").map((l) => "+" + l).join("\n");
    }
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
    const lines = text.split("\n").length;
    if (lines > LONG_RESULT) {  // long output starts collapsed
      pre.classList.add("collapsed");
      const more = el("button", "more", `Show all ${lines} lines`);
      more.type = "button";
      more.setAttribute("data-testid", "expand-result");
      more.addEventListener("click", () => {
        const collapsed = pre.classList.toggle("collapsed");
        more.textContent = collapsed ? `Show all ${lines} lines` : "Show less";
      });
      call.result = el("div", "result-box");
      call.result.append(pre, more);
      call.node.append(call.result);
    }
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
      case "tool_execution_end": {
        const result = ev.result || {};
        const diff = (result.details || {}).diff;  // write reports its change as a diff beside its text
        const text = textOf(result.content);
        this.toolResult(ev.tool_call_id, ev.tool_name, typeof diff === "string" && diff ? `${text}\n${diff}` : text, ev.is_error);
        break;
      }
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
      else if (m.role === "tool_result") {
        const diff = (m.details || {}).diff;
        const text = textOf(m.content);
        this.toolResult(m.tool_call_id, m.tool_name, typeof diff === "string" && diff ? `${text}\n${diff}` : text, m.is_error);
      } else if (m.role === "context_summary") this.note("(summary of the earlier conversation)");
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
function waitingForModel(on) {
  let note = document.getElementById("model-waiting");
  if (!on) { if (note) note.remove(); return; }
  if (!note) {
    note = el("div", "note waiting", "waiting for the model…");
    note.id = "model-waiting";
    note.setAttribute("data-testid", "model-waiting");
  }
  $("transcript").append(note);  // (moved) to the end
}

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
  renderApprovals(pending, state.pending_elicitations || []);
  if (state.commands) { commands = state.commands; commandHint(); }
}

// "/help" lists the session's custom slash commands (they run when sent as "/name args");
// typing "/" shows the commands whose names start with what was typed.
function helpText() {
  if (!commands.length) return "No custom commands (add Markdown files to .ketch/commands/ or ~/.config/ketch/commands/).";
  return ["Custom commands:", ...commands.map((c) => `${c.usage} — ${c.description} (${c.origin})`)].join("\n");
}

function commandHint() {
  const hint = $("command-hint");
  const text = $("input").value;
  const m = /^\/(\S*)$/.exec(text);
  const shown = m ? commands.filter((c) => c.name.startsWith(m[1])) : [];
  hint.replaceChildren(...shown.map((c) => {
    const item = el("li", null, `${c.usage} — ${c.description}`);
    item.setAttribute("data-testid", "command-hint-item");
    return item;
  }));
  hint.hidden = shown.length === 0;
}

function renderApprovals(pending, questions = []) {
  const box = $("approvals");
  box.replaceChildren();
  box.hidden = pending.length === 0 && questions.length === 0;
  for (const question of questions) box.append(elicitationView(question));
  for (const call of pending) {
    const row = el("div", "approval");
    row.setAttribute("data-testid", "approval");
    row.dataset.callId = call.tool_call_id;
    row.append(el("strong", null, call.tool_name), callView(call.tool_name, call.args || {}));
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

// A tool's server asks the user something during the run (an MCP elicitation): a URL to
// open (then Done retries the call) or a form (answered through the API; here declined).
function elicitationView(question) {
  const row = el("div", "approval");
  row.setAttribute("data-testid", "elicitation");
  row.dataset.elicitationId = question.id;
  row.append(el("strong", null, `MCP server ${question.server} asks`), el("span", null, question.message));
  if (question.mode === "url" && question.url) {
    // only an http(s) address becomes a link (a javascript: one is shown as text)
    const web = /^https?:\/\//i.test(question.url);
    const link = el(web ? "a" : "code", "elicitation-url", question.url);
    if (web) {
      link.href = question.url;
      link.target = "_blank";
      link.rel = "noopener noreferrer";
    }
    link.setAttribute("data-testid", "elicitation-url");
    row.append(link);
    const done = el("button", null, "Done, retry");
    done.type = "button";
    done.setAttribute("data-testid", "elicitation-accept");
    done.addEventListener("click", () => answerElicitation(question.id, "accept"));
    row.append(done);
  }
  const no = el("button", null, "Decline");
  no.type = "button";
  no.setAttribute("data-testid", "elicitation-decline");
  no.addEventListener("click", () => answerElicitation(question.id, "decline"));
  row.append(no);
  return row;
}

async function answerElicitation(id, action) {
  try {
    await api("POST", `/api/sessions/${current}/elicitations`, { id, action });
    showError("");
  } catch (err) {
    showError(err.message);
  }
}

// The whole call an approval asks about, wrapped and scrollable: a command as it will
// run, an edit as a diff, a write as its path and content, anything else as its arguments.
function callView(name, args) {
  const pre = el("pre", "call");
  pre.setAttribute("data-testid", "approval-call");
  const line = (cls, text) => pre.append(el("span", cls, text + "\n"));
  if (typeof args.command === "string") {
    line("cmd", args.command);
    for (const [key, value] of Object.entries(args)) if (key !== "command") line("meta", `${key}: ${JSON.stringify(value)}`);
  } else if (typeof args.old_string === "string" && typeof args.new_string === "string") {
    pre.classList.add("diff");
    line("hunk", `--- ${args.path || args.file_path || ""}`);
    for (const text of args.old_string.split("\n")) line("del", "-" + text);
    for (const text of args.new_string.split("\n")) line("add", "+" + text);
  } else if (typeof args.content === "string" && (args.path || args.file_path)) {
    pre.classList.add("diff");
    line("hunk", `+++ ${args.path || args.file_path}`);
    for (const text of args.content.split("\n")) line("add", "+" + text);
  } else {
    pre.textContent = JSON.stringify(args, null, 2);
  }
  return pre;
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
  // until the model answers (a local model may take a minute to load), say so
  if (ev.type === "agent_start" || ev.type === "turn_start") waitingForModel(true);
  else if (ev.type === "message_update" || ev.type === "agent_end" || ev.type === "tool_execution_start"
           || (ev.type === "message_end" && (ev.message || {}).role === "assistant")) waitingForModel(false);
  if (!frame) frame = requestAnimationFrame(flushRendering);  // scrolls once a frame, not per event
}

const RESYNC = {
  slow_client: "resynced: the page fell behind the stream, so it reloaded the session",
  behind: "resynced: the events missed are no longer kept, so the session was reloaded",
  restarted: "resynced: the server restarted, so the session was reloaded",
};

async function openSession(id, resynced) {
  if (source) source.close();
  source = null;
  current = id;
  if (location.hash !== `#session=${id}`) location.hash = `session=${id}`;
  showError("");
  const state = await api("GET", `/api/sessions/${id}`);
  const transcript = $("transcript");
  transcript.replaceChildren();
  dirty.clear();  // what the old transcript had pending is gone with it
  main = new View(transcript);
  main.load(state.messages || []);
  if (resynced) main.note(resynced);
  if (state.streaming) main.resume(state.streaming);
  const silent = !(state.streaming && (state.streaming.content || []).length);
  if (state.running && silent && ["starting", "llm_in_flight"].includes(state.phase)) waitingForModel(true);
  flushRendering();
  applyState(state);
  if (state.writable === false) {
    showError(state.error || "this session is open elsewhere (read-only)");
  } else {
    source = new EventSource(`/api/sessions/${id}/events?last_event_id=${encodeURIComponent(state.last_event_id)}`);
    source.onmessage = (e) => onEvent(JSON.parse(e.data));
    source.addEventListener("reset", (e) => {
      let reason = "";
      try { reason = JSON.parse(e.data).reason || ""; } catch (err) { /* no reason */ }
      openSession(id, RESYNC[reason] || `resynced (${reason || "the stream was reset"})`);
    });
  }
  document.body.dataset.session = id;
  await loadSessions();
}

// -- commands --------------------------------------------------------------------------------
async function send(kind) {
  const input = $("input");
  const text = input.value;
  if (!text.trim()) return;
  if (!current) {  // a fresh page: the first message starts a session
    try {
      const state = await api("POST", "/api/sessions", {});
      await openSession(state.id);
    } catch (err) {
      showError(err.message);
      return;
    }
  }
  if (text.trim() === "/help") {  // answered by the page, from the session's state
    const help = el("pre", "note help", helpText());
    help.setAttribute("data-testid", "help");
    $("transcript").append(help);
    input.value = "";
    commandHint();
    return;
  }
  const route = kind || (running ? "steer" : "prompt");
  try {
    await api("POST", `/api/sessions/${current}/${route}`, { text });
    input.value = "";
    commandHint();
    showError("");
    if (route !== "prompt") main.note(`(${route === "steer" ? "steering" : "follow-up queued"}: ${text})`);
  } catch (err) {
    showError(err.message);
  }
}

// "New session" only clears the page: the session is created by its first message, so
// clicking it leaves no empty entries behind.
function blankSession() {
  if (source) source.close();
  source = null;
  current = null;
  dirty.clear();
  main = new View($("transcript"));
  $("transcript").replaceChildren();
  $("title").textContent = "New session";
  renderApprovals([]);
  setRunning(false, false);
  delete document.body.dataset.session;
  if (location.hash) history.pushState(null, "", location.pathname);
  for (const item of document.querySelectorAll("#sessions li.current")) item.classList.remove("current");
  $("input").focus();
}

function newSession() {
  showError("");
  blankSession();
}

function start() {
  $("new-session").addEventListener("click", newSession);
  $("more-sessions").addEventListener("click", () => loadSessions(true).catch((err) => showError(err.message)));
  let searching = 0;
  $("search").addEventListener("input", () => {
    clearTimeout(searching);
    searching = setTimeout(() => loadSessions().catch((err) => showError(err.message)), 200);
  });
  main = new View($("transcript"));
  $("composer").addEventListener("submit", (e) => { e.preventDefault(); send(); });
  $("input").addEventListener("input", commandHint);
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
  $("transcript").addEventListener("scroll", () => {
    const t = $("transcript");
    stick = t.scrollHeight - t.scrollTop - t.clientHeight < 40;
  });
  window.addEventListener("hashchange", () => {  // back/forward and #session= links
    const m = /session=([0-9a-zA-Z_-]+)/.exec(location.hash);
    if (m && m[1] !== current) openSession(m[1]).catch((err) => showError(err.message));
  });
  const wanted = /session=([0-9a-zA-Z_-]+)/.exec(location.hash);
  loadSessions()
    .then(() => (wanted ? openSession(wanted[1]) : null))
    .catch((err) => showError(err.message))
    .finally(() => { document.body.dataset.ready = "1"; });
}

document.addEventListener("DOMContentLoaded", start);
