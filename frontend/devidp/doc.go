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
// registration_endpoint and client_id_metadata_document_supported), /keys, /authorize, /oauth/token,
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
// with Options.PagesRedirectURIs), dynamically registered public clients and
// clients named by a Client ID Metadata Document.
//
// Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document,
// recommended by the MCP 2026-07-28 authorization spec, which deprecates
// /register; cimd.go, cimd_fetch.go, cimd_http.go): discovery says
// client_id_metadata_document_supported, and a client_id that is an https URL
// (a path, no fragment, no dot segment, no userinfo; any other URL scheme is
// refused, never looked up) names a JSON document the provider GETs: no
// redirect followed, 200 only, a JSON media type, at most CIMDMaxBytes (5 KB)
// whatever Content-Length says, within Options.CIMDFetchTimeout (5 s), no proxy.
// The document's client_id must equal the URL (simple string comparison); it
// needs client_name and 1 to 10 redirect_uris (https, or http on a loopback
// host); it is a public client (token_endpoint_auth_method "none"; a
// shared-secret method or a client_secret member is refused); grant_types are
// authorization_code, refresh_token and the device grant (absent: the first
// two, as /register). Redirect URIs come from the document only, matched as a
// native client's (a loopback one on any port, RFC 8252 §7.3). A good document
// is reused while Cache-Control max-age (less Age) or Expires say it is fresh,
// 5 minutes without either, never past 24 hours, not at all under no-store or
// no-cache; a failure or a bad document is never cached (at most 1000 entries).
// /authorize checks a URL client_id before pkg/op does, so a refusal says why:
// 400, "invalid_client: client_id: …" or "invalid_request: redirect_uri: …",
// never a redirect to an unverified client's redirect URI; the token and
// device_authorization endpoints answer 401 invalid_client with the same
// description. SSRF: the dialer checks the address it connects to, after DNS
// resolution, with authz.PrivateIP (the webhooks' rule); an IP literal or
// localhost in the URL is refused before any lookup. Options.CIMDAllowLoopback
// lets loopback addresses through, nothing else special-use (a client developed
// on this machine; the tests' devpki server); Options.CIMDRootCAs adds a dev CA.
// The picker and the device page name such a client by the document's
// client_name, marked as its own claim, beside the host serving the document
// and client_uri's host; the picker also shows the redirect URI's host and warns
// when it is this machine (any program here could claim the name). The
// document's logo_uri and jwks_uri are never fetched.
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
