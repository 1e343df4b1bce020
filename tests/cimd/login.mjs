// The official TypeScript MCP client v2 (@modelcontextprotocol/client 2.4.0) signing in with a
// Client ID Metadata Document, as Claude Code and VS Code do when the authorization server
// advertises client_id_metadata_document_supported: no registration, its client_id is the
// https URL of its metadata document. Run by tests/cimd_test.go; by hand against `jobgate dev
// --cimd-allow-loopback --cimd-ca-file <ca.pem>` with a document served at JOBGATE_CLIENT_ID.
//
// Protocol with the driver, one JSON line each way (as tests/tsclient/oauth.mjs):
//   stdout {"client": {client_id, ...}}                     the client information the SDK chose
//   stdout {"authorize": "<authorization URL>"}               the driver signs in as the human
//   stdin  "<the URL the authorization server redirected to>"  (with code, state, iss)
//   stdout {"list_jobs": <structuredContent>, "tools": n}      after the code exchange and a reconnect
//   stdout {"error": "..."}                                    on any failure (exit status 1)
//
// Environment: JOBGATE_URL (the MCP endpoint), JOBGATE_CLIENT_ID (the metadata document's
// https URL), JOBGATE_REDIRECT_URL (one of the document's redirect_uris; nothing listens there,
// the driver hands the redirect back on stdin).
import { createInterface } from 'node:readline';

import { Client, StreamableHTTPClientTransport, UnauthorizedError } from '@modelcontextprotocol/client';

const serverUrl = new URL(process.env.JOBGATE_URL ?? '');
const clientMetadataUrl = process.env.JOBGATE_CLIENT_ID ?? '';
const redirectUrl = process.env.JOBGATE_REDIRECT_URL ?? '';
const say = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`);

// An in-memory OAuthClientProvider with clientMetadataUrl: what a real client keeps on disk,
// this keeps for one run. clientMetadata is what DCR would send; the SDK must not use it here.
class MemoryProvider {
  #client;
  #tokens;
  #verifier;
  #discovery;
  #state = crypto.randomUUID();
  clientMetadataUrl = clientMetadataUrl;
  get redirectUrl() { return redirectUrl; }
  get clientMetadata() {
    return {
      client_name: 'jobgate cimd login.mjs',
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
    say({ client: info });
  }
  tokens() { return this.#tokens; }
  saveTokens(tokens) { this.#tokens = tokens; }
  redirectToAuthorization(url) { say({ authorize: url.toString() }); }
  saveCodeVerifier(v) { this.#verifier = v; }
  codeVerifier() { return this.#verifier; }
  saveDiscoveryState(s) { this.#discovery = s; }
  discoveryState() { return this.#discovery; }
}

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

async function main() {
  const provider = new MemoryProvider();
  const transport = new StreamableHTTPClientTransport(serverUrl, { authProvider: provider });
  const first = new Client({ name: 'jobgate-cimd-check', version: '0.0.0' });
  try {
    await first.connect(transport);
    throw new Error('connected without signing in: /mcp did not ask for a token');
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
  await transport.finishAuth(u.searchParams);

  const client = new Client({ name: 'jobgate-cimd-check', version: '0.0.0' });
  await client.connect(new StreamableHTTPClientTransport(serverUrl, { authProvider: provider }));
  const { tools } = await client.listTools();
  const res = await client.callTool({ name: 'list_jobs', arguments: {} });
  if (res.isError) throw new Error(`list_jobs failed: ${JSON.stringify(res.content)}`);
  say({ list_jobs: res.structuredContent, tools: tools.length, token_client: provider.clientInformation()?.client_id });
  await client.close();
}

main().then(() => process.exit(0), (err) => {
  say({ error: String(err?.stack ?? err?.message ?? err) });
  process.exit(1);
});
