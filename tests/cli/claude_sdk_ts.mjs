// The TypeScript Claude Agent SDK (npm @anthropic-ai/claude-agent-sdk) driving ketch as its
// Claude Code (`pathToClaudeCodeExecutable`), for tests/cli/test_claude_sdk_ts.py.
//
// node claude_sdk_ts.mjs SCENARIO: runs one scenario and prints one JSON object (what the
// SDK gave back) on stdout. KETCH_SDK is the SDK's entry file (sdk.mjs), KETCH_CLI the
// executable to run as Claude Code, KETCH_WORK the working folder; the rest of the
// environment (KETCH_TEST_SCRIPT, HOME, ...) is passed on to ketch.
import { open } from "node:fs/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const { query } = await import(pathToFileURL(process.env.KETCH_SDK).href);
const scenario = process.argv[2];
const cwd = process.env.KETCH_WORK;
const stderr = [];
const base = {
  pathToClaudeCodeExecutable: process.env.KETCH_CLI,
  cwd,
  env: { ...process.env },
  stderr: (line) => stderr.push(line),
  mcpServersDelivery: "argv",
};

// A message as the test compares it: its type (and subtype), and its content blocks' types.
function shape(m) {
  if (m.type === "system") return `system:${m.subtype}`;
  if (m.type === "result") return `result:${m.subtype}`;
  if (m.type === "assistant" || m.type === "user") {
    const content = m.message.content;
    return `${m.type}:` + (Array.isArray(content) ? content.map((b) => b.type).join(",") : "text");
  }
  if (m.type === "stream_event") return `stream_event:${m.event.type}`;
  return m.type;
}

function blocks(messages, type) {
  return messages
    .filter((m) => m.type === "assistant" || m.type === "user")
    .flatMap((m) => (Array.isArray(m.message.content) ? m.message.content : []))
    .filter((b) => b.type === type);
}

function result(m) {
  return {
    subtype: m.subtype,
    is_error: m.is_error,
    num_turns: m.num_turns,
    result: m.result ?? null,
    total_cost_usd: m.total_cost_usd,
    stop_reason: m.stop_reason ?? null,
    permission_denials: m.permission_denials ?? [],
  };
}

async function toolRound() {
  const messages = [];
  for await (const m of query({ prompt: "what is here?", options: { ...base, includePartialMessages: true } })) {
    messages.push(m);
  }
  const init = messages[0];
  return {
    shapes: messages.map(shape),
    init: { model: init.model, tools: init.tools, permissionMode: init.permissionMode, cwd: init.cwd },
    tool_uses: blocks(messages, "tool_use").map((b) => ({ id: b.id, name: b.name, input: b.input })),
    tool_results: blocks(messages, "tool_result").map((b) => ({ id: b.tool_use_id, content: b.content, is_error: b.is_error })),
    deltas: messages
      .filter((m) => m.type === "stream_event" && m.event.type === "content_block_delta" && m.event.delta.type === "text_delta")
      .map((m) => m.event.delta.text),
    result: result(messages.at(-1)),
    same_session: messages.at(-1).session_id === init.session_id,
  };
}

async function canUseTool() {
  const asked = [];
  const decide = async (name, input, { toolUseID }) => {
    asked.push([name, input, toolUseID]);
    if (input.path === "a.txt") return { behavior: "allow", updatedInput: input };
    if (input.path === "b.txt") return { behavior: "allow", updatedInput: { ...input, content: "edited\n" } };
    return { behavior: "deny", message: "not today" };
  };
  const messages = [];
  // canUseTool needs streaming input (the SDK's rule): the prompt as an async iterable
  async function* prompt() {
    yield { type: "user", message: { role: "user", content: "write the files" }, parent_tool_use_id: null };
  }
  for await (const m of query({ prompt: prompt(), options: { ...base, canUseTool: decide } })) {
    messages.push(m);
  }
  return {
    asked,
    shapes: messages.map(shape),
    tool_results: blocks(messages, "tool_result").map((b) => ({ id: b.tool_use_id, content: b.content, is_error: b.is_error })),
    result: result(messages.at(-1)),
  };
}

async function interrupt() {
  let next;
  const sent = [];
  async function* prompt() {
    for (const text of ["wait for the gate", "and now?"]) {
      sent.push(text);
      yield { type: "user", message: { role: "user", content: text }, parent_tool_use_id: null };
      await new Promise((resolve) => (next = resolve));
    }
  }
  const options = { ...base, permissionMode: "bypassPermissions", allowDangerouslySkipPermissions: true, persistSession: false };
  const q = query({ prompt: prompt(), options });
  const first = [];
  const second = [];
  let writer = null;
  let interrupted = null;
  for await (const m of q) {
    (sent.length === 1 ? first : second).push(m);
    if (m.type === "assistant" && sent.length === 1 && writer === null) {
      // opening the fifo for writing returns once bash has it open for reading
      writer = await open(join(cwd, "gate"), "w");
      interrupted = (await q.interrupt()) ?? null;
    }
    if (m.type === "result") {
      if (sent.length === 2) break;
      next();
    }
  }
  await writer?.close();
  return {
    first: first.map(shape),
    first_result: result(first.at(-1)),
    terminal_reason: first.at(-1).terminal_reason ?? null,
    tool_result_is_error: blocks(first, "tool_result").map((b) => b.is_error),
    interrupt_answer: interrupted,
    second: second.map(shape),
    second_result: result(second.at(-1)),
  };
}

// What the SDK sends in its initialize request rather than as flags: the system prompt,
// an in-process MCP server, disallowed tools, the MCP servers (mcpServersDelivery
// "initialize"), and a hook.
async function initializeRequest() {
  const { createSdkMcpServer, tool } = await import(pathToFileURL(process.env.KETCH_SDK).href);
  const { z } = await import(pathToFileURL(process.env.KETCH_ZOD).href);
  const add = tool("add", "Add two numbers", { a: z.number(), b: z.number() }, async ({ a, b }) => ({
    content: [{ type: "text", text: String(a + b) }],
  }));
  const hooked = [];
  const after = async (input) => {
    hooked.push([input.hook_event_name, input.tool_name, input.tool_use_id]);
    return {};
  };
  const options = {
    ...base,
    mcpServersDelivery: "initialize",
    disallowedToolsDelivery: "initialize",
    permissionMode: "bypassPermissions", // only the disallowed rule stops bash
    systemPrompt: "Be brief.",
    mcpServers: { calc: createSdkMcpServer({ name: "calc", tools: [add] }) },
    allowedTools: ["mcp__calc__add"],
    disallowedTools: ["Bash"],
    hooks: { PostToolUse: [{ hooks: [after] }] },
  };
  const messages = [];
  for await (const m of query({ prompt: "add them", options })) messages.push(m);
  const init = messages[0];
  return {
    shapes: messages.map(shape),
    tools: init.tools,
    mcp_servers: init.mcp_servers,
    hooked,
    tool_results: blocks(messages, "tool_result").map((b) => ({ id: b.tool_use_id, content: b.content, is_error: b.is_error })),
    result: result(messages.at(-1)),
  };
}

// setModel() between two prompts of one query, then a second query resuming the session.
async function setModelAndResume() {
  let next;
  async function* prompt() {
    for (const text of ["first", "second"]) {
      yield { type: "user", message: { role: "user", content: text }, parent_tool_use_id: null };
      await new Promise((resolve) => (next = resolve));
    }
  }
  const q = query({ prompt: prompt(), options: base });
  const results = [];
  let sessionId = null;
  for await (const m of q) {
    if (m.type === "system" && m.subtype === "init") sessionId = m.session_id;
    if (m.type !== "result") continue;
    results.push(m.result);
    if (results.length === 2) break;
    await q.setModel(`scripted:${process.env.KETCH_OTHER_SCRIPT}`);
    next();
  }
  const resumed = [];
  // a new process: its model plays its own script
  const env = { ...base.env, KETCH_TEST_SCRIPT: process.env.KETCH_THIRD_SCRIPT };
  for await (const m of query({ prompt: "third", options: { ...base, env, resume: sessionId } })) resumed.push(m);
  return { results, session_id: sessionId, resumed: resumed.map(shape), resumed_result: result(resumed.at(-1)), resumed_session: resumed.at(-1).session_id };
}

const scenarios = {
  set_model_and_resume: setModelAndResume, tool_round: toolRound, can_use_tool: canUseTool, interrupt, initialize_request: initializeRequest };
try {
  const out = await scenarios[scenario]();
  process.stdout.write(JSON.stringify({ ...out, stderr }) + "\n");
} catch (error) {
  process.stdout.write(JSON.stringify({ error: String(error?.stack ?? error), stderr }) + "\n");
  process.exitCode = 1;
}
