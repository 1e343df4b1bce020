// jobgate's 2026-07-28 surface driven by the official TypeScript MCP client v2
// (@modelcontextprotocol/client, pinned to 2026-07-28 and with `auto` negotiation) and the Tasks
// extension's own requester (@modelcontextprotocol/ext-tasks): task sessions, input through
// tasks/update, cancel, Client.listen + notifications/tasks, and MRTR. The 2025-era client
// (@modelcontextprotocol/sdk 1.32.2) keeps its own checks in ../tsclient.
//
// Run by tests/tsclientv2_test.go against a real bundle; by hand against `jobgate dev`:
//
//   JOBGATE_URL=http://localhost:8080/mcp JOBGATE_TOKEN_ANA=… JOBGATE_TOKEN_STEWARD=… node contract.mjs
//
// Environment:
//   JOBGATE_URL             MCP endpoint (required)
//   JOBGATE_TOKEN_ANA       acme, jobs:read jobs:write (owns the jobs)
//
// Output: one line per check, `ok <name>` or `FAIL <name>: <why>`, then exactly `N passed, M failed`.
// The exit status is non-zero on any failure. `node contract.mjs --list` prints the check names.
//
// ext-tasks needs a host-owned raw request path for V2 task traffic (its docs: "Adapters and
// schemas"): rawDispatch below POSTs the framed request to the endpoint with the 2026-07-28
// headers (MCP-Protocol-Version, Mcp-Method, Mcp-Name) and hands back the JSON-RPC answer; it
// records each answer's HTTP status so the checks can see what the wire said.

import { Client, StreamableHTTPClientTransport, ProtocolError, SdkHttpError, isInputRequiredResult } from '@modelcontextprotocol/client';
import { createTaskSessionFromClient, JsonRpcResponseError, resultFromTaskOutcome } from '@modelcontextprotocol/ext-tasks/client';

const PROTOCOL = '2026-07-28';
const TASKS = 'io.modelcontextprotocol/tasks';
const CALL_TIMEOUT_MS = 30_000;
const DEADLINE_MS = 60_000;

class CheckError extends Error {}
function assert(cond, why) {
  if (!cond) throw new CheckError(why);
}
function eq(got, want, what) {
  assert(got === want, `${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`environment variable ${name} is not set`);
  return v;
}
let keyN = 0;
const runID = Math.random().toString(36).slice(2, 8);
const key = (what) => `tsv2-${what}-${runID}-${++keyN}`;

// ---------------------------------------------------------------------------------------------
// Clients.

const clientInfo = { name: 'jobgate-tsclient-v2', version: '1' };

async function connect(token, { mode = { pin: PROTOCOL }, capabilities = {}, elicit, inputRequired } = {}) {
  const client = new Client(clientInfo, { capabilities, versionNegotiation: { mode }, ...(inputRequired ? { inputRequired } : {}) });
  if (elicit) client.setRequestHandler('elicitation/create', elicit);
  const transport = new StreamableHTTPClientTransport(new URL(env('JOBGATE_URL')), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport, { timeout: CALL_TIMEOUT_MS });
  return client;
}

async function view(client, tool, args) {
  const res = await client.callTool({ name: tool, arguments: args }, { timeout: CALL_TIMEOUT_MS });
  assert(!res.isError, `${tool} answered an error: ${JSON.stringify(res.content)}`);
  assert(res.structuredContent && typeof res.structuredContent === 'object', `${tool}: no structuredContent`);
  return res.structuredContent;
}

async function waitStatus(client, kind, handle, want) {
  const end = Date.now() + DEADLINE_MS;
  let v;
  while (Date.now() < end) {
    v = await view(client, `get_${kind}`, { handle });
    if (want.includes(v.status)) return v;
    await sleep(Math.min(v.poll_after_ms || 200, 500));
  }
  throw new CheckError(`${kind} ${handle}: status ${v?.status}, want one of ${want.join('|')}`);
}

const evalArgs = (episodes, params = { episode_ms: 0, fail_rate: 0 }) => ({ idempotency_key: key('eval'), suite: 'demo', episodes, params });

// A Standard Schema that takes any JSON (what ext-tasks' own adapter passes to Client.request).
const anyJSON = { '~standard': { version: 1, vendor: 'jobgate', validate: (value) => ({ value }) } };

// rawDispatch: the host request coordinator ext-tasks needs for V2 task traffic.
let rawID = 0;
const wireLog = []; // {method, status, code}
function rawDispatcher(token) {
  return async (request, options = {}) => {
    const method = request.method;
    const params = request.params ?? {};
    const headers = {
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      Authorization: `Bearer ${token}`,
      'MCP-Protocol-Version': params._meta?.['io.modelcontextprotocol/protocolVersion'] ?? PROTOCOL,
      'Mcp-Method': method,
      ...(options.context?.headers ?? {}),
    };
    if (method === 'tools/call') headers['Mcp-Name'] = params.name;
    else if (method.startsWith('tasks/')) headers['Mcp-Name'] = params.taskId;
    const body = JSON.stringify({ jsonrpc: '2.0', id: `raw-${++rawID}`, ...request });
    const resp = await fetch(env('JOBGATE_URL'), { method: 'POST', headers, body, signal: options.signal });
    const text = await resp.text();
    let msg;
    try {
      msg = JSON.parse(text);
    } catch {
      throw new Error(`${method}: HTTP ${resp.status}, not JSON: ${text.slice(0, 200)}`);
    }
    wireLog.push({ method, status: resp.status, code: msg.error?.code });
    if (msg.error) return { kind: 'error', error: msg.error };
    return { kind: 'result', result: msg.result };
  };
}

// taskSession: an ext-tasks session over a pinned client. With elicit the requests also declare
// form elicitation, so jobgate may ask for input on the start call itself (MRTR) before any task.
async function taskSession(token, onInputRequest, { elicit = true } = {}) {
  const capabilities = { extensions: { [TASKS]: {} }, ...(elicit ? { elicitation: { form: {} } } : {}) };
  const client = await connect(token, { capabilities });
  const session = createTaskSessionFromClient(client, {
    endpointId: `jobgate-${runID}`,
    rawDispatch: rawDispatcher(token),
    v2RequestFraming: { protocolVersion: PROTOCOL, clientInfo, clientCapabilities: capabilities },
    ...(onInputRequest ? { onInputRequest } : {}),
  });
  return { client, session };
}

// ---------------------------------------------------------------------------------------------
// Checks.

const CHECKS = [
  ['pinned 2026-07-28: connects with server/discover, no initialize; tasks extension advertised', async ({ ana }) => {
    const c = await connect(ana);
    try {
      eq(c.getProtocolEra(), 'modern', 'era');
      const caps = c.getServerCapabilities();
      assert(caps?.extensions?.[TASKS] !== undefined, `no ${TASKS} in ${JSON.stringify(caps)}`);
      const { tools } = await c.listTools();
      for (const t of ['start_eval', 'get_eval', 'cancel_eval', 'resume_eval', 'list_jobs']) {
        assert(tools.some((x) => x.name === t), `tools/list lacks ${t}`);
      }
    } finally {
      await c.close();
    }
  }],
  ['auto negotiation: picks 2026-07-28 and runs a job to the end', async ({ ana }) => {
    const c = await connect(ana, { mode: 'auto' });
    try {
      eq(c.getProtocolEra(), 'modern', 'era');
      const v = await view(c, 'start_eval', evalArgs(2));
      eq(v.status === 'queued' || v.status === 'running' || v.status === 'succeeded', true, `start status ${v.status}`);
      const done = await waitStatus(c, 'eval', v.handle, ['succeeded', 'failed']);
      eq(done.status, 'succeeded', 'final status');
    } finally {
      await c.close();
    }
  }],
  ['legacy negotiation (the v2 client speaking 2025): initialize, same tools', async ({ ana }) => {
    const c = await connect(ana, { mode: 'legacy' });
    try {
      eq(c.getProtocolEra(), 'legacy', 'era');
      const v = await view(c, 'start_eval', evalArgs(1));
      assert(v.handle, 'no handle');
    } finally {
      await c.close();
    }
  }],
  ['tool error: isError result validates against the output schema, HTTP 200', async ({ ana }) => {
    const c = await connect(ana);
    try {
      const res = await c.callTool({ name: 'get_eval', arguments: { handle: 'garbage' } });
      eq(res.isError, true, 'isError');
      const te = JSON.parse(res.content[0].text);
      eq(te.code, 'invalid_handle', 'code');
    } finally {
      await c.close();
    }
  }],
  ['unknown method: HTTP 404 with -32601', async ({ ana }) => {
    const c = await connect(ana);
    try {
      let err;
      try {
        await c.request({ method: 'jobs/explode', params: {} }, anyJSON, { timeout: CALL_TIMEOUT_MS });
      } catch (e) {
        err = e;
      }
      assert(err, 'jobs/explode answered a result');
      const status = err instanceof SdkHttpError ? err.data?.status ?? err.status : undefined;
      const code = err instanceof ProtocolError ? err.code : undefined;
      assert(status === 404 || code === -32601, `want 404/-32601, got ${err?.constructor?.name}: ${err?.message}`);
      if (status === 404) assert(String(err.message).includes('-32601'), `404 body without -32601: ${err.message}`);
    } finally {
      await c.close();
    }
  }],
  ['tasks/get of an unknown task: ProtocolError -32602 from HTTP 400', async ({ ana }) => {
    const c = await connect(ana, { capabilities: { extensions: { [TASKS]: {} } } });
    try {
      let err;
      try {
        await c.request({ method: 'tasks/get', params: { taskId: 'no-such-task' } }, anyJSON, { headers: { 'Mcp-Name': 'no-such-task' }, timeout: CALL_TIMEOUT_MS });
      } catch (e) {
        err = e;
      }
      assert(err instanceof ProtocolError, `want a ProtocolError, got ${err?.constructor?.name}: ${err?.message}`);
      eq(err.code, -32602, 'code');
      eq(err.message.includes('Task not found'), true, `message ${err.message}`);
    } finally {
      await c.close();
    }
  }],
  ['MRTR: get_eval asks the owner through elicitation; the client answers and retries', async ({ ana }) => {
    const watcher = await connect(ana); // declares no elicitation: sees the plain view
    let asked = 0;
    const c = await connect(ana, {
      capabilities: { elicitation: { form: {} } },
      elicit: async (req) => {
        asked++;
        assert(String(req.params.message).includes('101 episodes'), `elicitation message: ${req.params.message}`);
        return { action: 'accept', content: { decision: 'approve', comment: 'tsclient v2 MRTR' } };
      },
    });
    try {
      const v = await view(watcher, 'start_eval', evalArgs(101));
      await waitStatus(watcher, 'eval', v.handle, ['awaiting_input']);
      const after = await view(c, 'get_eval', { handle: v.handle });
      eq(asked, 1, 'elicitations');
      assert(after.status !== 'awaiting_input', `still awaiting input after the answer: ${after.status}`);
      const done = await waitStatus(watcher, 'eval', v.handle, ['succeeded', 'failed']);
      eq(done.status, 'succeeded', 'final status');
    } finally {
      await watcher.close();
      await c.close();
    }
  }],
  ['MRTR manual: input_required is a valid InputRequiredResult (no content)', async ({ ana }) => {
    const watcher = await connect(ana);
    const c = await connect(ana, { capabilities: { elicitation: { form: {} } }, inputRequired: { autoFulfill: false } });
    try {
      const v = await view(watcher, 'start_eval', evalArgs(101));
      await waitStatus(watcher, 'eval', v.handle, ['awaiting_input']);
      const res = await c.callTool({ name: 'get_eval', arguments: { handle: v.handle } }, { allowInputRequired: true, timeout: CALL_TIMEOUT_MS });
      assert(isInputRequiredResult(res), `not input_required: ${JSON.stringify(res).slice(0, 300)}`);
      assert(!('content' in res), `carries content: ${JSON.stringify(res.content)}`);
      assert(res.inputRequests?.approval?.method === 'elicitation/create', `inputRequests: ${JSON.stringify(res.inputRequests)}`);
      assert(typeof res.requestState === 'string' && res.requestState.length > 0, 'no requestState');
      await view(watcher, 'cancel_eval', { handle: v.handle, reason: 'tsclient v2 manual MRTR check' });
    } finally {
      await watcher.close();
      await c.close();
    }
  }],
  ['ext-tasks: start_eval as a task runs to completed with the job view', async ({ ana }) => {
    const { session } = await taskSession(ana);
    try {
      const ex = await session.callTool('start_eval', evalArgs(3), { task: { preference: 'require' } });
      eq(ex.kind, 'task', 'execution kind');
      const seen = new Set();
      const { outcome } = await ex.settle({ onEvent: (e) => { if (e.type === 'task') seen.add(e.task.status); } });
      eq(outcome.status, 'completed', 'outcome');
      const res = resultFromTaskOutcome(outcome);
      eq(res.isError ?? false, false, 'isError');
      eq(res.structuredContent?.status, 'succeeded', 'job status');
    } finally {
      await session.close();
    }
  }],
  ['ext-tasks: the owner approval of a running task is input_required, answered through tasks/update', async ({ ana }) => {
    const deliveries = [];
    const { session } = await taskSession(ana, async (request, context) => {
      deliveries.push(`${request.kind}/${context.delivery}`);
      assert(String(request.params.message).includes('101 episodes'), `message: ${request.params.message}`);
      return { action: 'accept', content: { decision: 'approve', comment: 'tsclient v2 tasks/update' } };
    }, { elicit: false });
    try {
      wireLog.length = 0;
      const ex = await session.callTool('start_eval', evalArgs(101), { task: { preference: 'require' } });
      eq(ex.kind, 'task', 'execution kind');
      const seen = new Set();
      const { outcome } = await ex.settle({ onEvent: (e) => { if (e.type === 'task') seen.add(e.task.status); } });
      eq(outcome.status, 'completed', 'outcome');
      eq(resultFromTaskOutcome(outcome).structuredContent?.status, 'succeeded', 'job status');
      assert(seen.has('input_required'), `task statuses seen: ${[...seen].join(',')}`);
      eq(deliveries.join(','), 'elicitation/task-update', 'input deliveries');
      assert(wireLog.some((w) => w.method === 'tasks/update' && w.status === 200 && w.code === undefined), `no acknowledged tasks/update: ${JSON.stringify(wireLog)}`);
    } finally {
      await session.close();
    }
  }],
  ['ext-tasks + elicitation: an approval due at start comes on the start call (MRTR retry), then the task', async ({ ana }) => {
    const deliveries = [];
    const { session } = await taskSession(ana, async (request, context) => {
      deliveries.push(`${request.kind}/${context.delivery}`);
      return { action: 'accept', content: { decision: 'approve', comment: 'tsclient v2 MRTR at start' } };
    });
    try {
      wireLog.length = 0;
      const ex = await session.callTool('start_eval', evalArgs(101), { task: { preference: 'require' } });
      eq(ex.kind, 'task', 'execution kind');
      const { outcome } = await ex.settle();
      eq(outcome.status, 'completed', 'outcome');
      eq(resultFromTaskOutcome(outcome).structuredContent?.status, 'succeeded', 'job status');
      eq(deliveries.join(','), 'elicitation/request-retry', 'input deliveries');
      eq(wireLog.filter((w) => w.method === 'tools/call').length, 2, 'tools/call round trips');
    } finally {
      await session.close();
    }
  }],
  ['ext-tasks: cancel ends the task cancelled', async ({ ana }) => {
    const { session } = await taskSession(ana);
    try {
      const ex = await session.callTool('start_eval', evalArgs(40, { episode_ms: 1000, fail_rate: 0 }), { task: { preference: 'require' } });
      eq(ex.kind, 'task', 'execution kind');
      await ex.cancel();
      const { outcome } = await ex.settle();
      eq(outcome.status, 'cancelled', 'outcome');
    } finally {
      await session.close();
    }
  }],
  ['ext-tasks: an unknown taskId is -32602 (HTTP 400)', async ({ ana }) => {
    const { session } = await taskSession(ana);
    try {
      wireLog.length = 0;
      let err;
      try {
        await session.task('no-such-task').snapshot();
      } catch (e) {
        err = e;
      }
      assert(err instanceof JsonRpcResponseError, `want JsonRpcResponseError, got ${err?.constructor?.name}: ${err?.message}`);
      eq(err.code, -32602, 'code');
      const w = wireLog.find((x) => x.method === 'tasks/get');
      eq(w?.status, 400, 'HTTP status of tasks/get');
    } finally {
      await session.close();
    }
  }],
  ['Client.listen: notifications/tasks follow a task to completed', async ({ ana }) => {
    const capabilities = { extensions: { [TASKS]: {} } };
    const c = await connect(ana, { capabilities });
    const notes = [];
    c.fallbackNotificationHandler = async (n) => {
      if (n.method === 'notifications/tasks') notes.push(n.params);
    };
    const { session } = await taskSession(ana);
    let sub;
    try {
      const ex = await session.callTool('start_eval', evalArgs(3, { episode_ms: 300, fail_rate: 0 }), { task: { preference: 'require' } });
      eq(ex.kind, 'task', 'execution kind');
      const taskId = ex.handle.taskId;
      sub = await c.listen({ taskIds: [taskId] }, { timeout: CALL_TIMEOUT_MS });
      const end = Date.now() + DEADLINE_MS;
      while (Date.now() < end && !notes.some((n) => n.taskId === taskId && n.status === 'completed')) await sleep(100);
      const mine = notes.filter((n) => n.taskId === taskId);
      assert(mine.some((n) => n.status === 'completed'), `no completed notification; got ${JSON.stringify(mine.map((n) => n.status))}`);
      await ex.settle();
    } finally {
      await sub?.close();
      await session.close();
      await c.close();
    }
  }],
];

// ---------------------------------------------------------------------------------------------

if (process.argv.includes('--list')) {
  for (const [name] of CHECKS) console.log(name);
  process.exit(0);
}

const ctx = { ana: env('JOBGATE_TOKEN_ANA') };
let passed = 0;
let failed = 0;
for (const [name, fn] of CHECKS) {
  try {
    await fn(ctx);
    console.log(`ok ${name}`);
    passed++;
  } catch (e) {
    console.log(`FAIL ${name}: ${e instanceof CheckError ? e.message : (e?.stack ?? e)}`.replace(/\n/g, ' | '));
    failed++;
  }
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
