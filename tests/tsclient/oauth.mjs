// An MCP client that logs itself in, as Claude Code and MCP Inspector do: the official TypeScript
// MCP SDK's OAuth support (an OAuthClientProvider given to StreamableHTTPClientTransport) against
// jobgate's /mcp. Run by tests/oidc_test.go; by hand against `jobgate dev`:
//
//   JOBGATE_URL=http://localhost:8080/mcp node oauth.mjs
//   (then open the printed authorize URL, sign in, and paste the URL you land on)
//
// What the SDK does by itself: the first request gets 401 with resource_metadata; it reads the
// protected-resource metadata (RFC 9728), then the authorization server's metadata (RFC 8414 /
// OIDC discovery), registers a client (RFC 7591), and sends the user to the authorization
// endpoint with PKCE S256 and resource=<jobgate's resource URI> (RFC 8707).
//
// Protocol with the driver, one JSON line each way:
//   stdout {"registered": {client_id, redirect_uris, ...}}   the DCR answer
//   stdout {"authorize": "<authorization URL>"}               the driver logs in as the human
//   stdin  "<the URL the authorization server redirected to>"  (with code and state)
//   stdout {"list_jobs": <structuredContent>, "tools": n}      after the code exchange and a reconnect
//   stdout {"error": "..."}                                    on any failure (exit status 1)
//
// Environment: JOBGATE_URL (required), JOBGATE_REDIRECT_URL (default http://127.0.0.1:33418/callback:
// nothing listens there, the driver hands the redirect back on stdin).
import { createInterface } from 'node:readline';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

const serverUrl = new URL(process.env.JOBGATE_URL ?? '');
const redirectUrl = process.env.JOBGATE_REDIRECT_URL || 'http://127.0.0.1:33418/callback';
const say = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`);

// An in-memory OAuthClientProvider: what a real client keeps on disk, this keeps for one run.
class MemoryProvider {
  #client;
  #tokens;
  #verifier;
  #state = crypto.randomUUID();
  get redirectUrl() { return redirectUrl; }
  get clientMetadata() {
    return {
      client_name: 'jobgate tsclient oauth.mjs',
      redirect_uris: [redirectUrl],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  }
  state() { return this.#state; }
  expectedState() { return this.#state; }
  clientInformation() { return this.#client; }
  saveClientInformation(info) {
    this.#client = info;
    say({ registered: info });
  }
  tokens() { return this.#tokens; }
  saveTokens(tokens) { this.#tokens = tokens; }
  redirectToAuthorization(url) { say({ authorize: url.toString() }); }
  saveCodeVerifier(v) { this.#verifier = v; }
  codeVerifier() { return this.#verifier; }
}

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

async function connect(provider) {
  const client = new Client({ name: 'jobgate-oauth-check', version: '0.0.0' });
  const transport = new StreamableHTTPClientTransport(serverUrl, { authProvider: provider });
  await client.connect(transport);
  return { client, transport };
}

async function main() {
  const provider = new MemoryProvider();
  const transport = new StreamableHTTPClientTransport(serverUrl, { authProvider: provider });
  const first = new Client({ name: 'jobgate-oauth-check', version: '0.0.0' });
  try {
    await first.connect(transport);
    throw new Error('connected without logging in: /mcp did not ask for a token');
  } catch (err) {
    if (!(err instanceof UnauthorizedError)) throw err;
  }

  const { value: back, done } = await lines.next();
  if (done) throw new Error('stdin closed before the redirect URL came');
  const u = new URL(back.trim());
  if (u.searchParams.get('error')) {
    throw new Error(`authorization failed: ${u.searchParams.get('error')}: ${u.searchParams.get('error_description') ?? ''}`);
  }
  if (u.searchParams.get('state') !== provider.expectedState()) {
    throw new Error(`state mismatch: got ${u.searchParams.get('state')}`);
  }
  const code = u.searchParams.get('code');
  if (!code) throw new Error(`no code in ${back}`);
  await transport.finishAuth(code);

  const { client } = await connect(provider);
  const { tools } = await client.listTools();
  const res = await client.callTool({ name: 'list_jobs', arguments: {} });
  if (res.isError) throw new Error(`list_jobs failed: ${JSON.stringify(res.content)}`);
  say({ list_jobs: res.structuredContent, tools: tools.length });
  await client.close();
}

main().then(() => process.exit(0), (err) => {
  say({ error: String(err?.message ?? err) });
  process.exit(1);
});
