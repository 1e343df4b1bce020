// Package pages is jobgate's pages for people: browser sign-in (an OpenID Connect relying party,
// authorization code + PKCE S256, with coreos/go-oidc and x/oauth2, against any configured
// issuer, and the session it leaves behind) and, behind it, the job pages: the approvals inbox,
// a request page with its decision form, my jobs and a job's page (JobsHandler). Every page is
// one template of one set with one layout (templates/).
//
// The job pages read and answer jobs only through the Jobs interface, plain data in and out;
// package frontend implements it over its job core and supplies what differs per kind (a
// result's rows, a download link), so no page branches on a kind's name.
//
// No session lives on the server. The session is a cookie sealed with the handle keyring
// (handle.Session: AES-256-GCM under HKDF keys of its own), so any replica serves any request.
// It is HttpOnly, SameSite=Lax, Secure and named __Host-jobgate_session when the public URL is
// https (jobgate_session on an http loopback URL, the only http one allowed), lasts
// Config.SessionTTL, and is bound to the issuer: a cookie of another issuer is refused as if
// absent. A login in flight (state, nonce, PKCE verifier, return path) is a second sealed cookie
// on Path=/auth that lives ten minutes and is spent by the callback.
//
// Tenant and scopes come only from verified tokens: the ID token's claims first (names from
// Config.Claims, read by authz.PrincipalFromClaims as the bearer verifiers read them), then the
// access token through Config.AccessVerifier (the MCP endpoint's own bearer verifier) when the
// ID token lacks them. No tenant anywhere is a one-line error page and no session.
//
// Every state-changing request (POST) passes net/http.CrossOriginProtection and must carry a
// form field "csrf" equal to the session's CSRF token (compared in constant time).
//
// auth_time, acr and amr are kept in the session; RequireSession(maxAge) sends a session older
// than maxAge back to the identity provider with prompt=login&max_age=, and the callback then
// demands an auth_time within it.
//
// Logout is POST only: it clears the cookie and, when the provider's discovery names an
// end_session_endpoint, continues with RP-initiated logout there (client_id and
// post_logout_redirect_uri = <public URL>/auth/signed-out; the ID token is not kept in the
// session, to keep the cookie small, so no id_token_hint is sent and some providers ask the
// person to confirm). Without one it lands on /auth/signed-out directly.
//
// Of jobgate it imports only authz and frontend/handle; it must never import frontend (the job
// core imports it), workflows, activities (the SQL drivers) or cmd.
package pages
