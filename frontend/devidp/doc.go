// Package devidp is the development OpenID Provider that `jobgate dev` embeds.
//
// It is built on zitadel's certified pkg/op (never a hand-written OAuth
// server): this package only supplies the op.Storage and a dev-user picker
// in place of a password form. Its users are the dev principals handed in by
// cmd/app (frontend never imports cmd). Development only: anyone who can
// reach the login page can sign in as any dev user, and every page says so.
// So the picker, the device page and /register answer loopback clients only
// (403 and one line to any other RemoteAddr) unless Options.AllowRemote.
//
// Under the issuer URL (e.g. http://localhost:8080/oidc), pkg/op serves
// /.well-known/openid-configuration (answered by this package, to add
// registration_endpoint), /keys, /authorize, /oauth/token,
// /device_authorization, /userinfo, /revoke, /end_session; this package adds
// /login (the picker), /device (RFC 8628 code entry + picker), /register
// (RFC 7591, public clients only) and, at the host root,
// /.well-known/oauth-authorization-server<issuer path> (RFC 8414), which MCP
// clients try first.
//
// No CORS: pkg/op's default answers every origin with credentials, which let a
// page on any site read device_authorization's device_code and the token
// endpoint's answers. It is off (op.WithCORSOptions(nil)), and the token and
// device_authorization endpoints refuse any request naming an Origin (403,
// error_description naming Origin): their clients are native or servers.
// Discovery alone keeps Access-Control-Allow-Origin: * (public metadata). The
// device page names the client asking (its name, its ID) and the scopes.
//
// /register takes Content-Type application/json only (415 otherwise) and an
// Origin that is the issuer's own or none (403 otherwise): a page on another
// site could POST text/plain without a preflight and fill the client cap. A
// registered client never issued a token is dropped Options.UnusedClientTTL
// (default 24 hours) after registration. Redirect URIs are https, or http on
// a loopback host: localhost or a loopback IP literal, parsed (127.evil.example
// is a DNS name, not loopback).
//
// Clients: jobgate-cli (public, native: loopback redirects on any port,
// PKCE required, code + refresh + device), jobgate-pages (confidential, only
// with Options.PagesRedirectURIs) and dynamically registered public clients.
//
// PKCE is S256 only, as discovery says: a plain challenge (or one without a
// method, which RFC 7636 reads as plain) is refused at authorize with
// invalid_request naming code_challenge_method, and a code bound to one is
// never redeemed at the token endpoint.
//
// Tokens: access tokens are RS256 JWTs with aud = [resource URI, client id],
// tenant, and scope = the requested jobs:* scopes the user holds (all of the
// user's when none are requested), so authz.JWKSVerifier verifies them
// exactly as production tokens. Refresh tokens rotate on every use and are
// always issued (offline_access is implied, since MCP clients don't ask for
// it). No SSO session is kept: every authorize shows the picker, so
// prompt=login and max_age hold trivially and prompt=none is login_required.
//
// State in Options.Dir (files 0600, written atomically; empty Dir = all in
// memory): signing-key.pem (kid = RFC 7638 thumbprint, so it is stable across
// restarts), crypto-key, refresh-tokens.json (SHA-256 hashes only),
// clients.json (registered clients) and pages-client-secret. Auth requests,
// codes and device codes live in memory: a login in flight does not survive
// a restart. A rotated refresh token is kept as spent (its hash, until its
// expiry); presenting it again is reuse (OAuth 2.1 §4.3.1, RFC 9700 §4.14):
// invalid_grant, and every token of its family (all rotated from the same
// sign-in, the newest included) is revoked, across restarts too.
package devidp
