// jobgate's public contract (../../../shared/CONTRACT.md) driven by the official TypeScript MCP SDK
// client, the one Claude Desktop/Code and MCP Inspector are built on. Its Client.callTool validates
// structuredContent against the tool's outputSchema on every result, error results included, so a
// server whose results do not validate breaks real users even when every Go test passes.
//
// Run by tests/tsclient_test.go against a real bundle; by hand against `jobgate dev`:
//
//   JOBGATE_URL=http://localhost:8080/mcp JOBGATE_TOKEN_ANA=… JOBGATE_TOKEN_BO=… \
//   JOBGATE_TOKEN_STEWARD=… JOBGATE_TOKEN_OPS=… JOBGATE_TOKEN_GUS=… node contract.mjs
//
// Environment:
//   JOBGATE_URL               MCP endpoint (required)
//   JOBGATE_URL_ALT           a second replica's endpoint; bo, steward, ops and gus use it (optional)
//   JOBGATE_TOKEN_ANA, _BO    acme, jobs:read jobs:write
//   JOBGATE_TOKEN_STEWARD     acme, jobs:approve
//   JOBGATE_TOKEN_OPS         acme, jobs:read jobs:admin
//   JOBGATE_TOKEN_GUS         globex, jobs:read jobs:write
//   JOBGATE_UNKNOWN_HANDLE    a well-signed acme eval handle of a job that does not exist (optional:
//                             not_found answers are then also compared byte for byte with its answer)
//   JOBGATE_KINDS             comma-separated job kinds to check (default: every kind in CHECKS)
//
// The export checks need the dev stack's `customers` dataset (5,000 acme rows; columns id, name,
// email (sensitive), country, plan, signup_date). Artifact downloads go to JOBGATE_URL's origin: the
// download_url names the resource URI's origin (checked against the protected-resource metadata),
// which in tests is a load-balancer name no replica listens on, so only its path is kept.
//
// Output: one line per check, `ok <name>` or `FAIL <name>: <why>`, then exactly `N passed, M failed`.
// The exit status is non-zero on any failure. `node contract.mjs --list` prints the check names.
//
// Every tool call goes through client.callTool (after listTools, so the client holds each tool's
// output-schema validator); an exception it throws (e.g. -32602 "Structured content does not match
// the tool's output schema") fails the check that made the call.

import { createHash } from 'node:crypto';
import { gunzipSync } from 'node:zlib';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const STATUSES = ['queued', 'running', 'awaiting_input', 'succeeded', 'failed', 'cancelling', 'cancelled'];
const FINAL = ['succeeded', 'failed', 'cancelled'];
const CALL_TIMEOUT_MS = 30_000;
const POLL_DEADLINE_MS = 60_000;

// ---------------------------------------------------------------------------------------------
// Small assertion and protocol helpers.

class CheckError extends Error {}

function assert(cond, why) {
  if (!cond) throw new CheckError(why);
}

function eq(got, want, what) {
  assert(got === want, `${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}

function oneOf(got, wants, what) {
  assert(wants.includes(got), `${what}: got ${JSON.stringify(got)}, want one of ${wants.join('|')}`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function env(name, { required = true } = {}) {
  const v = process.env[name];
  if (required && !v) throw new Error(`environment variable ${name} is not set`);
  return v || '';
}

function canonical(v) {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

function textOf(res) {
  assert(Array.isArray(res.content) && res.content.length === 1, `want exactly one content item, got ${JSON.stringify(res.content)}`);
  const c = res.content[0];
  eq(c.type, 'text', 'content[0].type');
  return c.text;
}

// connect opens a Client as one principal and lists tools, which is what makes callTool validate.
async function connect(url, token, { fetchFn } = {}) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers }, fetch: fetchFn });
  const client = new Client({ name: 'jobgate-tsclient-contract', version: '1.0.0' });
  await client.connect(transport, { timeout: CALL_TIMEOUT_MS });
  const listed = await client.listTools(undefined, { timeout: CALL_TIMEOUT_MS });
  return { client, tools: listed.tools };
}

// call is the only way checks call tools: the SDK's validating callTool, nothing hand-rolled.
async function call(who, name, args) {
  assert(who.client.getToolOutputValidator(name), `client holds no outputSchema validator for ${name} (tools/list did not list it with an outputSchema)`);
  return who.client.callTool({ name, arguments: args }, undefined, { timeout: CALL_TIMEOUT_MS });
}

// ok asserts a successful result: structuredContent present (and already validated by the client),
// and the same JSON as the text content.
function ok(res, what) {
  if (res.isError) {
    let detail = '';
    try { detail = textOf(res); } catch { /* keep the generic message */ }
    throw new CheckError(`${what}: want a result, got isError ${detail}`);
  }
  assert(res.structuredContent && typeof res.structuredContent === 'object', `${what}: no structuredContent`);
  let text;
  try {
    text = JSON.parse(textOf(res));
  } catch (e) {
    throw new CheckError(`${what}: text content is not JSON: ${e.message}`);
  }
  assert(canonical(text) === canonical(res.structuredContent), `${what}: text content differs from structuredContent`);
  return res.structuredContent;
}

// view asserts a job view's shape beyond what the outputSchema says.
function view(res, what) {
  const v = ok(res, what);
  for (const f of ['handle', 'job_id', 'kind', 'status', 'owner', 'created_at', 'updated_at']) {
    assert(typeof v[f] === 'string' && v[f] !== '', `${what}: ${f} missing or empty`);
  }
  oneOf(v.status, STATUSES, `${what}: status`);
  assert(v.progress && typeof v.progress.total === 'number', `${what}: progress missing`);
  assert(Number.isInteger(v.poll_after_ms) && v.poll_after_ms >= 0, `${what}: poll_after_ms ${v.poll_after_ms}`);
  return v;
}

// toolError asserts an isError result carrying {code, message, retryable} as text, returned (not
// thrown) through the validating client. Returns the parsed error and its exact text.
function toolError(res, code, what) {
  assert(res.isError === true, `${what}: want isError with ${code}, got a result ${JSON.stringify(res.structuredContent ?? res.content).slice(0, 300)}`);
  const text = textOf(res);
  let err;
  try {
    err = JSON.parse(text);
  } catch (e) {
    throw new CheckError(`${what}: error text is not JSON: ${text}`);
  }
  assert(typeof err.code === 'string' && err.code !== '', `${what}: error has no code: ${text}`);
  if (code !== undefined) {
    const codes = Array.isArray(code) ? code : [code];
    assert(codes.includes(err.code), `${what}: want code ${codes.join('|')}, got ${err.code}: ${err.message}`);
  }
  assert(typeof err.message === 'string' && err.message !== '', `${what}: error has no message: ${text}`);
  assert(typeof err.retryable === 'boolean', `${what}: error has no boolean retryable: ${text}`);
  eq(err.retryable, err.code === 'unavailable' || err.code === 'quota_exceeded', `${what}: retryable of ${err.code}`);
  return { err, text };
}

// poll calls get_<kind> until pred(view) holds, sleeping at least poll_after_ms between calls.
async function poll(who, tool, handle, pred, what, deadlineMs = POLL_DEADLINE_MS) {
  const deadline = Date.now() + deadlineMs;
  let v;
  for (;;) {
    v = view(await call(who, tool, { handle }), `${what}: ${tool}`);
    if (pred(v)) return v;
    if (Date.now() > deadline) {
      throw new CheckError(`${what}: still ${v.status} (progress ${JSON.stringify(v.progress)}) after ${deadlineMs} ms`);
    }
    // Honour the server's pacing, but never spin and never sleep past the deadline by much.
    await sleep(Math.min(Math.max(v.poll_after_ms, 50), 2_000));
  }
}

// awaitInput polls until the job leaves queued/running and asserts it awaits input.
async function awaitInput(who, tool, handle, what) {
  const v = await poll(who, tool, handle, (x) => x.status !== 'queued' && x.status !== 'running', what);
  eq(v.status, 'awaiting_input', `${what}: status`);
  const ni = v.needs_input;
  assert(ni && typeof ni === 'object', `${what}: awaiting_input without needs_input`);
  assert(ni.input_id && ni.prompt && ni.answer_schema && ni.expires_at, `${what}: incomplete needs_input ${JSON.stringify(ni)}`);
  assert(typeof ni.scope_digest === 'string' && ni.scope_digest.startsWith('sha256:'), `${what}: scope_digest ${ni.scope_digest}`);
  assert(v.poll_after_ms > 0, `${what}: poll_after_ms is 0 while awaiting input`);
  return v;
}

// get fetches an artifact URL with Node's fetch, as a browser or curl would: the download_url's
// path (and query) against JOBGATE_URL's origin, with the given bearer token (none if '').
async function get(ctx, downloadURL, token, headers = {}) {
  const u = new URL(downloadURL);
  const target = new URL(u.pathname + u.search, ctx.url);
  const h = { ...headers };
  if (token) h.Authorization = `Bearer ${token}`;
  const r = await fetch(target, { headers: h, redirect: 'manual', signal: AbortSignal.timeout(CALL_TIMEOUT_MS) });
  const body = Buffer.from(await r.arrayBuffer());
  return { status: r.status, headers: r.headers, body };
}

function sameSet(got, want, what) {
  const g = [...got].sort();
  const w = [...want].sort();
  assert(canonical(g) === canonical(w), `${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)} (any order)`);
}

function need(ctx, key, check) {
  assert(ctx[key] !== undefined, `needs ${check}, which failed`);
  return ctx[key];
}

function newKey(tag) {
  return `ts-${tag}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

// ---------------------------------------------------------------------------------------------
// The checks: a table per job kind, run in order, sharing one context object. A check that needs
// an earlier check's output fails with "needs <check>" when that one failed. To cover a new kind
// (export), add its tools to TOOLS and a CHECKS.export table; `common` runs last.

const TOOLS = {
  common: ['list_jobs'],
  eval: ['start_eval', 'get_eval', 'cancel_eval', 'resume_eval', 'list_episodes'],
  export: ['start_export', 'get_export', 'cancel_export', 'resume_export', 'list_approvals'],
};

const fast = { episode_ms: 10, fail_rate: 0 };

// The dev stack's customers dataset: acme's rows, and the columns exported when none are named
// (all but the sensitive email).
const EXPORT_DATASET = 'customers';
const EXPORT_ACME_ROWS = 5000;
const EXPORT_DEFAULT_COLUMNS = ['id', 'name', 'country', 'plan', 'signup_date'];
const SHA256_HEX = /^[0-9a-f]{64}$/;

const CHECKS = {
  eval: [
    {
      name: 'eval/start creates a job',
      run: async (ctx) => {
        const args = { idempotency_key: newKey('basic'), suite: 'demo', episodes: 3, params: fast };
        const v = view(await call(ctx.ana, 'start_eval', args), 'start_eval');
        eq(v.created, true, 'created');
        eq(v.kind, 'eval', 'kind');
        eq(v.owner, 'ana', 'owner');
        eq(v.job_id, `acme/eval/ana/${args.idempotency_key}`, 'job_id');
        eq(v.progress.total, 3, 'progress.total');
        ctx.basicArgs = args;
        ctx.basic = v;
      },
    },
    {
      name: 'eval/start same key and arguments finds the job',
      run: async (ctx) => {
        const first = need(ctx, 'basic', 'eval/start creates a job');
        const v = view(await call(ctx.ana, 'start_eval', ctx.basicArgs), 'start_eval again');
        eq(v.created, false, 'created');
        eq(v.job_id, first.job_id, 'job_id');
      },
    },
    {
      name: 'eval/start same key other arguments is idempotency_key_reused',
      run: async (ctx) => {
        const args = { ...need(ctx, 'basicArgs', 'eval/start creates a job'), episodes: 4 };
        toolError(await call(ctx.ana, 'start_eval', args), 'idempotency_key_reused', 'start_eval other args');
      },
    },
    {
      name: 'eval/get polls to succeeded with a result',
      run: async (ctx) => {
        const h = need(ctx, 'basic', 'eval/start creates a job').handle;
        const v = await poll(ctx.ana, 'get_eval', h, (x) => FINAL.includes(x.status), 'wait for the end');
        eq(v.status, 'succeeded', 'final status');
        assert(v.result && typeof v.result === 'object', 'no result');
        eq(v.result.episodes, 3, 'result.episodes');
        eq(v.progress.done, 3, 'progress.done');
        eq(v.poll_after_ms, 0, 'poll_after_ms of a finished job');
      },
    },
    {
      name: 'eval/get by another user of the tenant is not_found',
      run: async (ctx) => {
        const h = need(ctx, 'basic', 'eval/start creates a job').handle;
        const { text } = toolError(await call(ctx.bo, 'get_eval', { handle: h }), 'not_found', 'bo get_eval');
        ctx.boNotFound = text;
        if (ctx.unknownHandle) {
          const u = toolError(await call(ctx.bo, 'get_eval', { handle: ctx.unknownHandle }), 'not_found', 'bo get_eval unknown');
          eq(text, u.text, 'not_found of a hidden job vs an unknown job (bytes)');
        }
      },
    },
    {
      name: 'eval/get by another tenant is not_found, byte-identical',
      run: async (ctx) => {
        const h = need(ctx, 'basic', 'eval/start creates a job').handle;
        const { text } = toolError(await call(ctx.gus, 'get_eval', { handle: h }), 'not_found', 'gus get_eval');
        eq(text, need(ctx, 'boNotFound', 'eval/get by another user of the tenant is not_found'), "gus's not_found vs bo's (bytes)");
        if (ctx.unknownHandle) {
          const u = toolError(await call(ctx.bo, 'get_eval', { handle: ctx.unknownHandle }), 'not_found', 'bo get_eval unknown');
          eq(text, u.text, 'not_found of another tenant vs an unknown job (bytes)');
        }
      },
    },
    {
      name: 'eval/get by a tenant admin sees the job',
      run: async (ctx) => {
        const first = need(ctx, 'basic', 'eval/start creates a job');
        const v = view(await call(ctx.ops, 'get_eval', { handle: first.handle }), 'ops get_eval');
        eq(v.job_id, first.job_id, 'job_id');
        eq(v.owner, 'ana', 'owner');
      },
    },
    {
      name: 'eval/get garbage handle is invalid_handle',
      run: async (ctx) => {
        toolError(await call(ctx.ana, 'get_eval', { handle: 'garbage' }), 'invalid_handle', 'get_eval garbage');
      },
    },
    {
      name: 'eval/start episodes 0 is invalid_argument naming episodes',
      run: async (ctx) => {
        const args = { idempotency_key: newKey('zero'), suite: 'demo', episodes: 0, params: fast };
        const { err } = toolError(await call(ctx.ana, 'start_eval', args), 'invalid_argument', 'start_eval episodes 0');
        assert(err.message.includes('episodes'), `message does not name episodes: ${err.message}`);
      },
    },
    {
      name: 'eval/start unknown argument is invalid_argument naming it',
      run: async (ctx) => {
        const args = { idempotency_key: newKey('unknown'), suite: 'demo', episodes: 1, params: fast, colour_of_sky: 'blue' };
        const { err } = toolError(await call(ctx.ana, 'start_eval', args), 'invalid_argument', 'start_eval unknown argument');
        assert(err.message.includes('colour_of_sky'), `message does not name colour_of_sky: ${err.message}`);
      },
    },
    {
      name: 'eval/start above the approval threshold awaits the owner',
      run: async (ctx) => {
        // concurrency 1 × 150 episodes × 50 ms keeps it running ~7.5 s after approval: time to cancel.
        const args = { idempotency_key: newKey('gated'), suite: 'demo', episodes: 150, concurrency: 1, params: { episode_ms: 50, fail_rate: 0 } };
        const started = view(await call(ctx.ana, 'start_eval', args), 'start_eval 150');
        eq(started.created, true, 'created');
        ctx.gatedID = started.job_id;
        const v = await poll(ctx.ana, 'get_eval', started.handle, (x) => x.status !== 'queued' && x.status !== 'running', 'wait for input');
        eq(v.status, 'awaiting_input', 'status');
        const ni = v.needs_input;
        assert(ni && typeof ni === 'object', 'awaiting_input without needs_input');
        assert(ni.input_id && ni.prompt && ni.answer_schema && ni.expires_at, `incomplete needs_input ${JSON.stringify(ni)}`);
        assert(typeof ni.scope_digest === 'string' && ni.scope_digest.startsWith('sha256:'), `scope_digest ${ni.scope_digest}`);
        eq(ni.approver, 'owner', 'needs_input.approver');
        eq(v.progress.done, 0, 'progress.done before approval');
        assert(v.poll_after_ms > 0, 'poll_after_ms is 0 while awaiting input');
        ctx.gated = v;
      },
    },
    {
      name: 'eval/resume by an approve-only principal is a tool error',
      run: async (ctx) => {
        const v = need(ctx, 'gated', 'eval/start above the approval threshold awaits the owner');
        const args = { handle: v.handle, input_id: v.needs_input.input_id, scope_digest: v.needs_input.scope_digest, decision: 'approve' };
        toolError(await call(ctx.steward, 'resume_eval', args), ['not_found', 'forbidden'], 'steward resume_eval');
      },
    },
    {
      name: 'eval/resume with a wrong scope_digest is input_not_expected',
      run: async (ctx) => {
        const v = need(ctx, 'gated', 'eval/start above the approval threshold awaits the owner');
        const args = { handle: v.handle, input_id: v.needs_input.input_id, scope_digest: `sha256:${'0'.repeat(64)}`, decision: 'approve' };
        toolError(await call(ctx.ana, 'resume_eval', args), 'input_not_expected', 'resume_eval wrong digest');
      },
    },
    {
      name: 'eval/resume by the owner approves and runs',
      run: async (ctx) => {
        const v = need(ctx, 'gated', 'eval/start above the approval threshold awaits the owner');
        const args = { handle: v.handle, input_id: v.needs_input.input_id, scope_digest: v.needs_input.scope_digest, decision: 'approve', comment: 'ts client' };
        const r = view(await call(ctx.ana, 'resume_eval', args), 'resume_eval');
        eq(r.job_id, v.job_id, 'job_id');
        oneOf(r.status, ['queued', 'running', 'succeeded'], 'status after approval');
        assert(r.needs_input == null, `needs_input still set after approval: ${JSON.stringify(r.needs_input)}`);
        ctx.approved = r;
      },
    },
    {
      name: 'eval/cancel reports cancelling or cancelled',
      run: async (ctx) => {
        const v = need(ctx, 'approved', 'eval/resume by the owner approves and runs');
        const r = view(await call(ctx.ana, 'cancel_eval', { handle: v.handle, reason: 'ts client contract' }), 'cancel_eval');
        eq(r.job_id, v.job_id, 'job_id');
        oneOf(r.status, ['cancelling', 'cancelled'], 'status after cancel');
        ctx.cancelled = r;
      },
    },
    {
      name: 'eval/get polls to cancelled',
      run: async (ctx) => {
        const v = need(ctx, 'cancelled', 'eval/cancel reports cancelling or cancelled');
        const r = await poll(ctx.ana, 'get_eval', v.handle, (x) => FINAL.includes(x.status), 'wait for cancelled');
        eq(r.status, 'cancelled', 'final status');
        assert(r.progress.done < 150, `all ${r.progress.done} episodes ran despite the cancel`);
      },
    },
    {
      name: 'eval/cancel again reports the final state',
      run: async (ctx) => {
        const v = need(ctx, 'cancelled', 'eval/cancel reports cancelling or cancelled');
        const r = view(await call(ctx.ana, 'cancel_eval', { handle: v.handle }), 'cancel_eval again');
        eq(r.status, 'cancelled', 'status');
      },
    },
  ],
  export: [
    {
      name: 'export/start default columns creates a job without approval',
      run: async (ctx) => {
        const args = { idempotency_key: newKey('exp'), dataset: EXPORT_DATASET, format: 'jsonl', purpose: 'ts contract' };
        const v = view(await call(ctx.ana, 'start_export', args), 'start_export');
        eq(v.created, true, 'created');
        eq(v.kind, 'export', 'kind');
        eq(v.owner, 'ana', 'owner');
        eq(v.job_id, `acme/export/ana/${args.idempotency_key}`, 'job_id');
        oneOf(v.status, ['queued', 'running'], 'status (no sensitive column: no approval)');
        assert(v.needs_input == null, `needs_input on a start without sensitive columns: ${JSON.stringify(v.needs_input)}`);
        ctx.expArgs = args;
        ctx.exp = v;
      },
    },
    {
      name: 'export/start same key and arguments finds the job',
      run: async (ctx) => {
        const first = need(ctx, 'exp', 'export/start default columns creates a job without approval');
        const v = view(await call(ctx.ana, 'start_export', ctx.expArgs), 'start_export again');
        eq(v.created, false, 'created');
        eq(v.job_id, first.job_id, 'job_id');
      },
    },
    {
      name: 'export/start same key other format is idempotency_key_reused',
      run: async (ctx) => {
        const args = { ...need(ctx, 'expArgs', 'export/start default columns creates a job without approval'), format: 'csv' };
        toolError(await call(ctx.ana, 'start_export', args), 'idempotency_key_reused', 'start_export other format');
      },
    },
    {
      name: 'export/start unknown dataset is invalid_argument naming dataset and the known ones',
      run: async (ctx) => {
        const args = { idempotency_key: newKey('nods'), dataset: 'no_such_dataset', format: 'jsonl', purpose: 'ts contract' };
        const { err } = toolError(await call(ctx.ana, 'start_export', args), 'invalid_argument', 'start_export unknown dataset');
        assert(err.message.includes('dataset'), `message does not name dataset: ${err.message}`);
        assert(err.message.includes(EXPORT_DATASET), `message does not list ${EXPORT_DATASET}: ${err.message}`);
      },
    },
    {
      name: 'export/start unknown column is invalid_argument naming columns',
      run: async (ctx) => {
        const args = { idempotency_key: newKey('nocol'), dataset: EXPORT_DATASET, format: 'jsonl', columns: ['id', 'shoe_size'], purpose: 'ts contract' };
        const { err } = toolError(await call(ctx.ana, 'start_export', args), 'invalid_argument', 'start_export unknown column');
        assert(err.message.includes('columns'), `message does not name columns: ${err.message}`);
      },
    },
    {
      name: 'export/start without purpose is invalid_argument naming purpose',
      run: async (ctx) => {
        const args = { idempotency_key: newKey('nopurpose'), dataset: EXPORT_DATASET, format: 'jsonl' };
        const { err } = toolError(await call(ctx.ana, 'start_export', args), 'invalid_argument', 'start_export without purpose');
        assert(err.message.includes('purpose'), `message does not name purpose: ${err.message}`);
      },
    },
    {
      name: 'export/get polls to succeeded with a result and a download_url',
      run: async (ctx) => {
        const h = need(ctx, 'exp', 'export/start default columns creates a job without approval').handle;
        const v = await poll(ctx.ana, 'get_export', h, (x) => FINAL.includes(x.status), 'wait for the end');
        eq(v.status, 'succeeded', `final status (error ${JSON.stringify(v.error)})`);
        const r = v.result;
        assert(r && typeof r === 'object', 'no result');
        eq(r.rows, EXPORT_ACME_ROWS, 'result.rows');
        assert(typeof r.sha256 === 'string' && SHA256_HEX.test(r.sha256), `result.sha256 ${JSON.stringify(r.sha256)} is not 64 hex digits`);
        eq(r.format, 'jsonl', 'result.format');
        eq(canonical(r.columns), canonical(EXPORT_DEFAULT_COLUMNS), 'result.columns');
        assert(typeof r.download_url === 'string' && r.download_url !== '', `no download_url (note ${JSON.stringify(r.note)})`);
        eq(v.poll_after_ms, 0, 'poll_after_ms of a finished job');
        // download_url is served where the resource is: its origin is the resource URI's.
        const res = await fetch(new URL('/.well-known/oauth-protected-resource', ctx.url), { signal: AbortSignal.timeout(CALL_TIMEOUT_MS) });
        eq(res.status, 200, 'protected-resource metadata status');
        const meta = await res.json();
        const u = new URL(r.download_url);
        eq(u.origin, new URL(meta.resource).origin, 'download_url origin vs the resource URI');
        assert(u.pathname.startsWith('/artifacts/') && u.pathname.length > '/artifacts/'.length, `download_url path ${u.pathname}`);
        ctx.expDone = v;
      },
    },
    {
      name: "export/download with the owner's bearer is the file the result describes",
      run: async (ctx) => {
        const r = need(ctx, 'expDone', 'export/get polls to succeeded with a result and a download_url').result;
        const d = await get(ctx, r.download_url, ctx.tokens.ana);
        eq(d.status, 200, `GET download_url status (body ${d.body.subarray(0, 200).toString()})`);
        const sum = createHash('sha256').update(d.body).digest('hex');
        eq(sum, r.sha256, 'sha256 of the downloaded bytes vs result.sha256');
        eq(d.body.length, r.bytes, 'downloaded bytes vs result.bytes');
        let text;
        try {
          text = gunzipSync(d.body).toString('utf8');
        } catch (e) {
          throw new CheckError(`the download is not gzip: ${e.message}`);
        }
        const lines = text.split('\n');
        if (lines[lines.length - 1] === '') lines.pop();
        eq(lines.length, EXPORT_ACME_ROWS, 'JSON lines in the file');
        const ids = new Set();
        for (const [i, line] of lines.entries()) {
          let row;
          try {
            row = JSON.parse(line);
          } catch (e) {
            throw new CheckError(`line ${i + 1} is not JSON: ${line.slice(0, 200)}`);
          }
          assert(row && typeof row === 'object' && !Array.isArray(row), `line ${i + 1} is not an object: ${line.slice(0, 200)}`);
          assert(!('email' in row), `line ${i + 1} has the sensitive email column: ${line.slice(0, 200)}`);
          sameSet(Object.keys(row), EXPORT_DEFAULT_COLUMNS, `line ${i + 1} columns`);
          ids.add(row.id);
        }
        eq(ids.size, EXPORT_ACME_ROWS, 'distinct ids in the file');
        ctx.expBytes = d.body;
      },
    },
    {
      name: 'export/download without a bearer is 401',
      run: async (ctx) => {
        const r = need(ctx, 'expDone', 'export/get polls to succeeded with a result and a download_url').result;
        const d = await get(ctx, r.download_url, '');
        eq(d.status, 401, 'GET download_url without Authorization');
        const challenge = d.headers.get('www-authenticate');
        assert(challenge && challenge.includes('resource_metadata='), `WWW-Authenticate ${JSON.stringify(challenge)} lacks resource_metadata`);
      },
    },
    {
      name: "export/download with another principal's bearer is 404",
      run: async (ctx) => {
        const r = need(ctx, 'expDone', 'export/get polls to succeeded with a result and a download_url').result;
        const d = await get(ctx, r.download_url, ctx.tokens.bo);
        eq(d.status, 404, "GET download_url with bo's bearer");
      },
    },
    {
      name: "export/download with another tenant's bearer is 404",
      run: async (ctx) => {
        const r = need(ctx, 'expDone', 'export/get polls to succeeded with a result and a download_url').result;
        const d = await get(ctx, r.download_url, ctx.tokens.gus);
        eq(d.status, 404, "GET download_url with gus's bearer");
      },
    },
    {
      name: 'export/download Range bytes=0-9 is 206 with 10 bytes',
      run: async (ctx) => {
        const r = need(ctx, 'expDone', 'export/get polls to succeeded with a result and a download_url').result;
        const d = await get(ctx, r.download_url, ctx.tokens.ana, { Range: 'bytes=0-9' });
        eq(d.status, 206, 'GET download_url with Range bytes=0-9');
        eq(d.body.length, 10, 'bytes in the 206 body');
        eq(d.headers.get('content-range'), `bytes 0-9/${r.bytes}`, 'Content-Range');
        if (ctx.expBytes) eq(d.body.toString('hex'), ctx.expBytes.subarray(0, 10).toString('hex'), 'the range vs the first 10 bytes of the file');
      },
    },
    {
      name: 'export/start a sensitive column awaits an approver other than the owner',
      run: async (ctx) => {
        const purpose = `ts contract four eyes ${Date.now().toString(36)}`;
        const args = { idempotency_key: newKey('pii'), dataset: EXPORT_DATASET, format: 'jsonl', columns: ['id', 'email'], purpose };
        const started = view(await call(ctx.ana, 'start_export', args), 'start_export with email');
        eq(started.created, true, 'created');
        ctx.piiID = started.job_id;
        const v = await awaitInput(ctx.ana, 'get_export', started.handle, 'wait for approval');
        const ni = v.needs_input;
        eq(ni.approver, 'approver', 'needs_input.approver');
        assert(ni.scope && typeof ni.scope === 'object', `needs_input.scope missing: ${JSON.stringify(ni)}`);
        eq(ni.scope.purpose, purpose, 'needs_input.scope.purpose');
        eq(v.progress.done, 0, 'progress.done before approval');
        ctx.pii = v;
      },
    },
    {
      name: 'export/resume by the owner is forbidden (four eyes)',
      run: async (ctx) => {
        const v = need(ctx, 'pii', 'export/start a sensitive column awaits an approver other than the owner');
        const args = { handle: v.handle, input_id: v.needs_input.input_id, scope_digest: v.needs_input.scope_digest, decision: 'approve' };
        toolError(await call(ctx.ana, 'resume_export', args), 'forbidden', 'ana resume_export of her own export');
      },
    },
    {
      name: 'export/list_approvals shows the job to an approver',
      run: async (ctx) => {
        const v = need(ctx, 'pii', 'export/start a sensitive column awaits an approver other than the owner');
        // Visibility is eventually consistent: list again (from the first page) until the job shows.
        const deadline = Date.now() + 30_000;
        for (;;) {
          let found;
          let cursor;
          for (let page = 0; page < 50 && !found; page++) {
            const args = { page_size: 100 };
            if (cursor) args.cursor = cursor;
            const l = ok(await call(ctx.steward, 'list_approvals', args), 'steward list_approvals');
            for (const row of l.jobs ?? []) {
              assert(row.job_id.startsWith('acme/'), `steward's approvals show another tenant's job ${row.job_id}`);
              eq(row.status, 'awaiting_input', `status of listed ${row.job_id}`);
              if (row.job_id === v.job_id) found = row;
            }
            cursor = l.next_cursor;
            if (!cursor) break;
          }
          if (found) {
            assert(found.needs_input, `listed ${v.job_id} without needs_input`);
            eq(found.needs_input.input_id, v.needs_input.input_id, 'listed needs_input.input_id');
            eq(found.needs_input.scope_digest, v.needs_input.scope_digest, 'listed needs_input.scope_digest');
            return;
          }
          if (Date.now() > deadline) throw new CheckError(`steward's list_approvals lacks ${v.job_id}`);
          await sleep(200);
        }
      },
    },
    {
      name: 'export/resume with a wrong scope_digest is input_not_expected',
      run: async (ctx) => {
        const v = need(ctx, 'pii', 'export/start a sensitive column awaits an approver other than the owner');
        const args = { handle: v.handle, input_id: v.needs_input.input_id, scope_digest: `sha256:${'0'.repeat(64)}`, decision: 'approve' };
        toolError(await call(ctx.steward, 'resume_export', args), 'input_not_expected', 'steward resume_export wrong digest');
      },
    },
    {
      name: 'export/resume by the approver approves and runs',
      run: async (ctx) => {
        const v = need(ctx, 'pii', 'export/start a sensitive column awaits an approver other than the owner');
        const args = { handle: v.handle, input_id: v.needs_input.input_id, scope_digest: v.needs_input.scope_digest, decision: 'approve', comment: 'ts client' };
        const r = view(await call(ctx.steward, 'resume_export', args), 'steward resume_export');
        eq(r.job_id, v.job_id, 'job_id');
        oneOf(r.status, ['queued', 'running', 'succeeded'], 'status after approval');
        assert(r.needs_input == null, `needs_input still set after approval: ${JSON.stringify(r.needs_input)}`);
        ctx.piiApproved = true;
      },
    },
    {
      name: 'export/get polls the approved job to succeeded',
      run: async (ctx) => {
        need(ctx, 'piiApproved', 'export/resume by the approver approves and runs');
        const v = await poll(ctx.ana, 'get_export', ctx.pii.handle, (x) => FINAL.includes(x.status), 'wait for the end');
        eq(v.status, 'succeeded', `final status (error ${JSON.stringify(v.error)})`);
        assert(v.result && typeof v.result === 'object', 'no result');
        eq(v.result.rows, EXPORT_ACME_ROWS, 'result.rows');
        eq(canonical(v.result.columns), canonical(['id', 'email']), 'result.columns');
        eq(v.result.approved_by, 'steward', 'result.approved_by');
      },
    },
    {
      name: "export/get of another tenant's job is not_found",
      run: async (ctx) => {
        const v = need(ctx, 'pii', 'export/start a sensitive column awaits an approver other than the owner');
        const { text } = toolError(await call(ctx.gus, 'get_export', { handle: v.handle }), 'not_found', 'gus get_export');
        if (ctx.boNotFound) eq(text, ctx.boNotFound, "gus's not_found of an export vs bo's of an eval (bytes)");
      },
    },
    {
      name: 'export/cancel of a job awaiting approval reports cancelling or cancelled',
      run: async (ctx) => {
        const args = { idempotency_key: newKey('pii-cancel'), dataset: EXPORT_DATASET, format: 'csv', columns: ['id', 'email'], purpose: 'ts contract cancel' };
        const started = view(await call(ctx.ana, 'start_export', args), 'start_export with email');
        eq(started.created, true, 'created');
        const v = await awaitInput(ctx.ana, 'get_export', started.handle, 'wait for approval');
        const r = view(await call(ctx.ana, 'cancel_export', { handle: v.handle, reason: 'ts client contract' }), 'cancel_export');
        eq(r.job_id, v.job_id, 'job_id');
        oneOf(r.status, ['cancelling', 'cancelled'], 'status after cancel');
        const f = await poll(ctx.ana, 'get_export', v.handle, (x) => FINAL.includes(x.status), 'wait for cancelled');
        eq(f.status, 'cancelled', 'final status');
        assert(f.result == null, `a cancelled export has a result: ${JSON.stringify(f.result)}`);
        ctx.expCancelled = f;
      },
    },
    {
      name: 'export/cancel again reports the final state',
      run: async (ctx) => {
        const v = need(ctx, 'expCancelled', 'export/cancel of a job awaiting approval reports cancelling or cancelled');
        const r = view(await call(ctx.ana, 'cancel_export', { handle: v.handle }), 'cancel_export again');
        eq(r.status, 'cancelled', 'status');
      },
    },
  ],
};

const COMMON = [
  {
    name: 'list_jobs shows own jobs, not those of others',
    run: async (ctx) => {
      const mine = [need(ctx, 'basic', 'eval/start creates a job').job_id];
      if (ctx.gatedID) mine.push(ctx.gatedID);
      for (const k of ['exp', 'expCancelled']) if (ctx[k]) mine.push(ctx[k].job_id);
      if (ctx.piiID) mine.push(ctx.piiID);
      const bos = view(await call(ctx.bo, 'start_eval', { idempotency_key: newKey('bo'), suite: 'demo', episodes: 1, params: fast }), 'bo start_eval');
      // Visibility is eventually consistent: list again (from the first page) until ana's jobs show.
      const deadline = Date.now() + 30_000;
      for (;;) {
        const seen = new Set();
        let cursor;
        for (let page = 0; page < 50; page++) {
          const args = { page_size: 100 };
          if (cursor) args.cursor = cursor;
          const l = ok(await call(ctx.ana, 'list_jobs', args), 'list_jobs');
          for (const row of l.jobs ?? []) {
            eq(row.owner, 'ana', `owner of listed ${row.job_id}`);
            assert(row.job_id !== bos.job_id, `ana's list shows bo's job ${bos.job_id}`);
            assert(row.job_id.startsWith('acme/'), `ana's list shows another tenant's job ${row.job_id}`);
            seen.add(row.job_id);
          }
          cursor = l.next_cursor;
          if (!cursor) break;
        }
        const missing = mine.filter((id) => !seen.has(id));
        if (missing.length === 0) return;
        if (Date.now() > deadline) throw new CheckError(`ana's list lacks ${missing.join(', ')} (saw ${seen.size} jobs)`);
        await sleep(200);
      }
    },
  },
  {
    name: 'list_jobs bad cursor is cursor_invalid',
    run: async (ctx) => {
      toolError(await call(ctx.ana, 'list_jobs', { cursor: 'x' }), 'cursor_invalid', 'list_jobs cursor x');
    },
  },
  {
    name: 'no token is HTTP 401 with a resource_metadata challenge',
    run: async (ctx) => {
      let challenge = null;
      const fetchFn = async (url, init) => {
        const r = await fetch(url, init);
        if (r.status === 401) challenge = r.headers.get('www-authenticate');
        return r;
      };
      let conn;
      try {
        conn = await connect(ctx.url, '', { fetchFn });
      } catch (e) {
        assert(e instanceof StreamableHTTPError, `want a StreamableHTTPError, got ${e?.constructor?.name}: ${e?.message}`);
        eq(e.code, 401, 'HTTP status');
        assert(challenge && challenge.includes('resource_metadata='), `WWW-Authenticate ${JSON.stringify(challenge)} lacks resource_metadata`);
        return;
      }
      await conn.client.close();
      throw new CheckError('a token-less client connected and listed tools');
    },
  },
];

function toolsListCheck(kinds) {
  const want = [...kinds.flatMap((k) => TOOLS[k]), ...TOOLS.common];
  return {
    name: 'tools/list declares input and output schemas',
    run: async (ctx) => {
      const byName = new Map(ctx.ana.tools.map((t) => [t.name, t]));
      for (const n of want) {
        const t = byName.get(n);
        assert(t, `tools/list lacks ${n} (has ${[...byName.keys()].join(', ')})`);
        assert(t.inputSchema?.type === 'object', `${n}: inputSchema is not an object schema`);
        assert(t.outputSchema?.type === 'object', `${n}: outputSchema is not an object schema`);
      }
    },
  };
}

// ---------------------------------------------------------------------------------------------

function plan() {
  const all = Object.keys(CHECKS);
  const kinds = process.env.JOBGATE_KINDS ? process.env.JOBGATE_KINDS.split(',').map((s) => s.trim()).filter(Boolean) : all;
  for (const k of kinds) if (!CHECKS[k]) throw new Error(`unknown kind ${k} (have ${all.join(', ')})`);
  return [toolsListCheck(kinds), ...kinds.flatMap((k) => CHECKS[k]), ...COMMON];
}

function describe(e) {
  if (e instanceof CheckError) return e.message;
  // Anything else is an exception out of the SDK or the transport: say so, with its code.
  const code = e?.code !== undefined ? ` (code ${e.code})` : '';
  return `exception ${e?.constructor?.name ?? typeof e}${code}: ${e?.message ?? String(e)}`;
}

async function main() {
  const checks = plan();
  if (process.argv.includes('--list')) {
    for (const c of checks) console.log(c.name);
    return 0;
  }
  const url = env('JOBGATE_URL');
  const alt = env('JOBGATE_URL_ALT', { required: false }) || url;
  const ctx = { url, unknownHandle: env('JOBGATE_UNKNOWN_HANDLE', { required: false }) || undefined };
  const who = { ana: [url, 'JOBGATE_TOKEN_ANA'], bo: [alt, 'JOBGATE_TOKEN_BO'], steward: [alt, 'JOBGATE_TOKEN_STEWARD'],
    ops: [alt, 'JOBGATE_TOKEN_OPS'], gus: [alt, 'JOBGATE_TOKEN_GUS'] };
  ctx.tokens = Object.fromEntries(Object.entries(who).map(([name, [, tokenVar]]) => [name, env(tokenVar, { required: false })]));
  const clients = [];
  let passed = 0;
  let failed = 0;
  try {
    for (const [name, [u, tokenVar]] of Object.entries(who)) {
      ctx[name] = await connect(u, env(tokenVar));
      clients.push(ctx[name].client);
    }
  } catch (e) {
    // Without clients nothing can run: every check fails, and says why.
    for (const c of checks) console.log(`FAIL ${c.name}: setup: ${describe(e)}`);
    console.log(`0 passed, ${checks.length} failed`);
    return 1;
  }
  for (const c of checks) {
    try {
      await c.run(ctx);
      passed++;
      console.log(`ok ${c.name}`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${c.name}: ${describe(e).replace(/\s*\n\s*/g, ' ')}`);
    }
  }
  await Promise.allSettled(clients.map((c) => c.close()));
  console.log(`${passed} passed, ${failed} failed`);
  return failed === 0 ? 0 : 1;
}

main().then(
  (code) => { process.exitCode = code; },
  (e) => { console.log(`FAIL contract.mjs: ${describe(e)}`); console.log('0 passed, 1 failed'); process.exitCode = 1; },
);
