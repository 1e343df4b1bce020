// A second, independent OpenID Provider for jobgate's tests: the OpenID Certified npm package
// oidc-provider, configured from a JSON file the Go test writes (tests/support/oidctest builds it).
//
//   node idp.mjs config.json
//
// It listens on 127.0.0.1:0 and prints one JSON line on stdout, {"issuer": "http://127.0.0.1:PORT"},
// once it serves. Everything it knows (keys, sessions, grants, DCR clients) is in memory and dies
// with the process: each test gets a fresh provider.
//
// Config (every field but users and clients optional):
//   resources        resource indicators (RFC 8707) it issues JWT access tokens for; the first is the
//                    default when a client sends none
//   resource_scopes  scopes those resources know (default the four jobs:* scopes)
//   users            [{sub, scopes: [..], claims: {tenant: .., name: ..}}]; claims go into the access
//                    token (extraTokenClaims) and the ID token; a user without "tenant" gets none
//   clients          oidc-provider client metadata (client_id, client_secret, redirect_uris,
//                    grant_types, token_endpoint_auth_method, application_type, ...)
//   access_token_ttl, device_code_ttl, refresh_token_ttl   seconds
//   pkce_optional_clients  client IDs of confidential clients that may redeem a code without PKCE
//                    (Temporal's ui-server sends none); every other client must use it
//
// Interactions: /interaction/<uid> shows the users as one submit button each (a POST of sub=<sub>
// to /interaction/<uid>/login) and a Deny button (action=deny → access_denied). Consent is granted
// without a page: the resource scopes granted are the requested ones that the user has.
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { generateKeyPairSync, randomBytes, createHash } from 'node:crypto';
import Provider from 'oidc-provider';

const cfgPath = process.argv[2];
if (!cfgPath) {
  console.error('usage: node idp.mjs config.json');
  process.exit(2);
}
const cfg = JSON.parse(readFileSync(cfgPath, 'utf8'));
const users = new Map((cfg.users || []).map((u) => [u.sub, u]));
const resources = cfg.resources || [];
const pkceOptional = new Set(cfg.pkce_optional_clients || []);
const resourceScopes = cfg.resource_scopes || ['jobs:read', 'jobs:write', 'jobs:approve', 'jobs:admin'];
const claimNames = new Set();
for (const u of users.values()) for (const k of Object.keys(u.claims || {})) claimNames.add(k);

// RS256 signing key, fresh per process; kid = SHA-256 of the modulus (stable within the run).
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const jwk = privateKey.export({ format: 'jwk' });
jwk.kid = createHash('sha256').update(jwk.n).digest('base64url').slice(0, 16);
jwk.alg = 'RS256';
jwk.use = 'sig';

const esc = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const page = (title, body) => `<!DOCTYPE html><html><head><meta charset="utf-8"><title>${esc(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font-family:sans-serif;max-width:32em;margin:2em auto;padding:0 1em}button{display:block;width:100%;min-height:44px;margin:.5em 0;font-size:1em}.deny{background:#fee}</style>
</head><body><p><strong>oidc-provider test IdP</strong> (jobgate tests only: no passwords)</p>${body}</body></html>`;

const server = http.createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: cfg.clients || [],
  jwks: { keys: [jwk] },
  cookies: { keys: [randomBytes(32).toString('hex')] },
  // The resource scopes are listed too: a DCR request's `scope` metadata (the TypeScript SDK
  // sends the protected-resource metadata's scopes_supported) may only name scopes listed here.
  scopes: ['openid', 'offline_access', 'profile', 'email', ...resourceScopes],
  claims: { openid: ['sub', ...claimNames] },
  // The ID token carries the claims too (tenant among them): a relying party reads them there.
  conformIdTokenClaims: false,
  // PKCE always, except for the confidential clients named in pkce_optional_clients.
  pkce: { required: (ctx, client) => client.clientAuthMethod === 'none' || !pkceOptional.has(client.clientId) },
  clientDefaults: {
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: 'none',
    id_token_signed_response_alg: 'RS256',
  },
  ttl: {
    AccessToken: cfg.access_token_ttl || 600,
    DeviceCode: cfg.device_code_ttl || 600,
    RefreshToken: cfg.refresh_token_ttl || 86400,
    Grant: 86400,
    Session: 86400,
    Interaction: 600,
    IdToken: 600,
    AuthorizationCode: 60,
  },
  async findAccount(ctx, sub) {
    const u = users.get(sub);
    if (!u) return undefined;
    return {
      accountId: sub,
      async claims() {
        return { sub, ...(u.claims || {}) };
      },
    };
  },
  // The user's claims (tenant, ...) in every JWT access token for a resource server.
  async extraTokenClaims(ctx, token) {
    const u = users.get(token.accountId);
    if (!u || !token.resourceServer) return undefined;
    return { ...(u.claims || {}) };
  },
  // A refresh token for every client allowed the grant, offline_access asked for or not: the
  // TypeScript SDK and Claude Code don't ask for it.
  async issueRefreshToken(ctx, client) {
    return client.grantTypeAllowed('refresh_token');
  },
  interactions: { url: async (ctx, interaction) => `/interaction/${interaction.uid}` },
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true },
    revocation: { enabled: true },
    introspection: { enabled: true },
    userinfo: { enabled: true },
    // RP-initiated logout (/session/end): a plain confirm page, as the others (the library's default
    // imports a web font, which a test browser without network would wait for).
    rpInitiatedLogout: {
      enabled: true,
      async logoutSource(ctx, form) {
        ctx.body = page('Sign out', `<h1>Sign out of the test IdP?</h1>${form}
<button type="submit" form="op.logoutForm" name="logout" value="yes">Yes, sign me out</button>
<button class="deny" type="submit" form="op.logoutForm">No, stay signed in</button>`);
      },
      async postLogoutSuccessSource(ctx) {
        ctx.body = page('Signed out', '<p id="signed-out">You are signed out of the test IdP.</p>');
      },
    },
    deviceFlow: {
      enabled: true,
      async userCodeInputSource(ctx, form, out, err) {
        const msg = err ? `<p>error: ${esc(err.name || 'error')}</p>` : '<p>Enter the code shown on your device</p>';
        ctx.body = page('Device sign-in', `${msg}${form}<button type="submit" form="op.deviceInputForm">Continue</button>`);
      },
      async userCodeConfirmSource(ctx, form, client, deviceInfo, userCode) {
        ctx.body = page('Confirm device', `<p>Client <strong>${esc(client.clientId)}</strong> shows the code <code>${esc(userCode)}</code></p>${form}
<button type="submit" form="op.deviceConfirmForm">Continue</button>
<button class="deny" type="submit" form="op.deviceConfirmForm" name="abort" value="yes">Abort</button>`);
      },
      async successSource(ctx) {
        ctx.body = page('Signed in', '<p id="device-done">Sign-in successful: you can close this page.</p>');
      },
    },
    resourceIndicators: {
      enabled: true,
      async defaultResource(ctx, client, oneOf) {
        return oneOf || resources[0];
      },
      // A refresh or code exchange without `resource` keeps the one granted.
      async useGrantedResource() {
        return true;
      },
      async getResourceServerInfo(ctx, resourceIndicator) {
        if (!resources.includes(resourceIndicator)) {
          throw new Provider.errors.InvalidTarget(`unknown resource ${resourceIndicator}`);
        }
        return {
          scope: resourceScopes.join(' '),
          audience: resourceIndicator,
          accessTokenTTL: cfg.access_token_ttl || 600,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        };
      },
    },
  },
});
provider.on('server_error', (ctx, err) => console.error('server_error', err));

async function readForm(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

// Consent without a page: grant the missing OIDC scopes and claims, and of each resource's
// requested scopes those the user has.
async function autoConsent(req, res, details) {
  const { prompt: { details: d }, params, session: { accountId } } = details;
  const u = users.get(accountId);
  let grant = details.grantId ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId, clientId: params.client_id });
  if (d.missingOIDCScope) grant.addOIDCScope(d.missingOIDCScope.join(' '));
  if (d.missingOIDCClaims) grant.addOIDCClaims(d.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(d.missingResourceScopes || {})) {
    // The scopes the user lacks are rejected (not left missing): rejected counts as answered,
    // so consent is not asked again, and the token's scope leaves them out.
    const has = new Set(u?.scopes || []);
    const granted = scopes.filter((s) => has.has(s));
    const rejected = scopes.filter((s) => !has.has(s));
    if (granted.length) grant.addResourceScope(indicator, granted.join(' '));
    if (rejected.length) grant.rejectResourceScope(indicator, rejected.join(' '));
  }
  const grantId = await grant.save();
  const consent = details.grantId ? {} : { grantId };
  await provider.interactionFinished(req, res, { consent }, { mergeWithLastSubmission: true });
}

async function interaction(req, res, url) {
  const m = url.pathname.match(/^\/interaction\/([^/]+)(\/login)?$/);
  if (!m) return false;
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== m[1]) throw new Error('interaction uid mismatch');
  if (req.method === 'GET' && details.prompt.name === 'consent') {
    await autoConsent(req, res, details);
    return true;
  }
  if (req.method === 'GET') {
    const buttons = [...users.values()].map((u) => {
      const t = u.claims?.tenant ? ` (tenant ${esc(u.claims.tenant)})` : ' (no tenant)';
      return `<button type="submit" name="sub" value="${esc(u.sub)}">${esc(u.sub)}${t}: ${esc((u.scopes || []).join(' '))}</button>`;
    }).join('\n');
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
    res.end(page('Sign in', `<h1>Sign in to ${esc(details.params.client_id)}</h1>
<form method="post" action="/interaction/${esc(details.uid)}/login">${buttons}
<button class="deny" type="submit" name="action" value="deny">Deny</button></form>`));
    return true;
  }
  if (req.method === 'POST' && m[2]) {
    const form = await readForm(req);
    if (form.get('action') === 'deny') {
      await provider.interactionFinished(req, res, {
        error: 'access_denied', error_description: 'the user denied the request',
      }, { mergeWithLastSubmission: false });
      return true;
    }
    const sub = form.get('sub');
    if (!users.has(sub)) {
      res.writeHead(400, { 'content-type': 'text/plain' });
      res.end(`unknown user ${sub}`);
      return true;
    }
    await provider.interactionFinished(req, res, { login: { accountId: sub, amr: ['test'] } },
      { mergeWithLastSubmission: false });
    return true;
  }
  return false;
}

const callback = provider.callback();
server.on('request', async (req, res) => {
  const url = new URL(req.url, issuer);
  try {
    if (await interaction(req, res, url)) return;
  } catch (err) {
    console.error('interaction', err);
    if (!res.headersSent) {
      res.writeHead(400, { 'content-type': 'text/plain' });
      res.end(`interaction error: ${err.message}`);
    }
    return;
  }
  callback(req, res);
});

process.stdout.write(`${JSON.stringify({ issuer, jwks_uri: `${issuer}/jwks` })}\n`);
// The Go test kills the process; stdin closing (the test's end) stops it too.
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
