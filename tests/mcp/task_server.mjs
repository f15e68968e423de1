// An MCP server with task support (MCP 2025-11-25 tasks), over stdio, for the client tests.
// The Python `mcp` SDK (2.3) serves no tasks, so this is built on the TypeScript SDK that
// server-everything installs into .cache/npm (its task store, as server-everything uses it).
//
// `research` declares execution.taskSupport "optional": called as a task it reports the
// status "working: gathering" and then, with `hold: true`, stays working until `release`
// is called (so a test can see a task outlive a wait without sleeping); it completes with
// "report on <topic> (task)". Called without a task, the SDK runs the task itself and answers the same.
// With the argument `--no-task-calls` the server does not declare task-augmented tool calls.
import path from "node:path";
import { pathToFileURL } from "node:url";

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const sdk = (p) => import(pathToFileURL(path.join(root, ".cache/npm/node_modules", p)).href);
const { McpServer } = await sdk("@modelcontextprotocol/sdk/dist/esm/server/mcp.js");
const { StdioServerTransport } = await sdk("@modelcontextprotocol/sdk/dist/esm/server/stdio.js");
const { InMemoryTaskStore, InMemoryTaskMessageQueue } = await sdk("@modelcontextprotocol/sdk/dist/esm/experimental/tasks/index.js");
const { z } = await sdk("zod/index.js");

const taskCalls = !process.argv.includes("--no-task-calls");
const taskStore = new InMemoryTaskStore();
const tasks = taskCalls ? { tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } } : {};
const server = new McpServer(
  { name: "tasker", version: "1.0.0" },
  { capabilities: { tools: {}, ...tasks }, taskStore, taskMessageQueue: new InMemoryTaskMessageQueue() },
);

const held = [];
const schema = { topic: z.string().describe("what to research"), hold: z.boolean().default(false).describe("wait for release") };

server.experimental.tasks.registerToolTask(
  "research",
  { description: "Research a topic (long: runs as a task when the client can).", inputSchema: schema, execution: { taskSupport: "optional" } },
  {
    createTask: async (args, extra) => {
      const task = await extra.taskStore.createTask({ ttl: 300000, pollInterval: 50 });
      const id = task.taskId;
      (async () => {
        await extra.taskStore.updateTaskStatus(id, "working", "gathering");
        if (args.hold) await new Promise((resolve) => held.push(resolve));
        const now = await extra.taskStore.getTask(id);
        if (now && now.status === "working") {
          await extra.taskStore.storeTaskResult(id, "completed", { content: [{ type: "text", text: `report on ${args.topic} (task)` }] });
        }
      })().catch((error) => console.error(error));
      return { task };
    },
    getTask: async (args, extra) => await extra.taskStore.getTask(extra.taskId),
    getTaskResult: async (args, extra) => await extra.taskStore.getTaskResult(extra.taskId),
  },
);


server.registerTool("release", { description: "Let every held research task finish." }, async () => {
  const n = held.length;
  held.splice(0).forEach((resolve) => resolve());
  return { content: [{ type: "text", text: `released ${n}` }] };
});

await server.connect(new StdioServerTransport());
