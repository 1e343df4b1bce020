// Package authz proves who is calling jobgate and decides what they may do.
//
// It is a leaf: no MCP and no Temporal. Everything here is a pure function or
// a verifier; the only I/O is the JWKS verifier fetching its identity
// provider's key set (github.com/MicahParks/keyfunc/v3).
//
// # Happy path
//
// At startup the server builds one [Verifier]. In production that is
// [NewJWTVerifier] with the issuer, this server's resource URI as audience,
// an allow-list such as []string{"RS256", "ES256", "EdDSA"} and a JWKS keyfunc;
// in the dev stack it is [NewHS256Verifier] with a shared secret, and
// `jobgate token` mints matching tokens with [MintHS256]:
//
//	v, err := authz.NewHS256Verifier("https://issuer.example", "https://jobs.example/mcp", secret, "")
//	tok, err := authz.MintHS256(secret, authz.MintOptions{
//		Issuer: "https://issuer.example", Audience: "https://jobs.example/mcp",
//		Tenant: "acme", Subject: "alice", Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite},
//	})
//
// To accept several issuers (dev: `jobgate token` HS256 beside the dev
// identity provider's JWKS), give one verifier per issuer to
// [NewMultiVerifier]; it picks the verifier by the token's iss, so a token
// is only ever checked against its own issuer's keys. The claims a
// principal is read from are named by [ClaimNames] (JWTOptions.TenantClaim
// and ScopeClaim), and [PrincipalFromClaims] reads them the same way for
// bearer tokens and for browser sign-in. A JWT with nonce, at_hash or c_hash
// is an OIDC ID token and never passes as a bearer.
//
// For each HTTP request:
//
//  1. Take the bearer token from the Authorization header and call
//     [Verifier.Verify]. An error (it always wraps [ErrInvalidToken]) becomes
//     401 with a WWW-Authenticate challenge; its message is safe to log.
//  2. [Claims.Principal] is the caller: tenant, sub and known scopes. It is
//     the only identity; tool arguments and handles never supply one.
//  3. Map the tool to an [Action] and check p.HasAny(ActionScopes(a)...)
//     before touching any job. If false, answer 403 insufficient_scope
//     naming ActionScopes(a)[0].
//  4. For start and list, call [Decide] with a zero [Job]; for list, [ListAll]
//     says whether to show the whole tenant or only p.Subject's jobs.
//  5. For every other action, load the job by its tenant-scoped ID, fill
//     [Job] from its stored state (tenant, owner, who may answer its open
//     input request) and call [Decide]: [Allow] proceeds, [NotFound] answers
//     exactly like an unknown job (tool error not_found), [Forbidden] answers
//     tool error forbidden.
//
// # Guarantees
//
//   - Verify never returns a Principal that fails [Principal.Valid]; its
//     tenant passes [ValidTenant] (so never contains '/', and is safe inside a
//     workflow ID) and its subject passes [ValidSubject]. Its Scopes hold only
//     known scopes, deduplicated, in [AllScopes] order; unknown scope strings
//     in a token are dropped, never an error.
//   - Verify requires iss (exact), aud (contains the configured resource URI,
//     string or array), exp, sub and the tenant claim; checks nbf and iat when
//     present, with leeway; accepts only allow-listed algorithms (never
//     "none"); and rejects tokens over [MaxTokenBytes] before decoding.
//   - Every Verify error wraps ErrInvalidToken, and its message is built from
//     fixed text and configuration only: never the token or a value from it.
//   - Decide is deny-by-default and pure. A job of another tenant is always
//     NotFound, and Forbidden is only returned to a caller who may already see
//     the job, so answers never reveal whether a hidden job exists. Adding
//     scopes to a principal never turns an answer from Allow into a denial.
//   - ActionScopes and Decide agree: a principal holding none of
//     ActionScopes(a) is never allowed a.
//   - jobs:approve reaches only jobs of the caller's tenant whose open input
//     request needs an approver ([ApproverApprover]): while it is open, any
//     jobs:approve holder may get, download and resume the job. A request
//     for the owner ([ApproverOwner]) is answered only by the owner with
//     jobs:write; to an approve holder who is neither owner nor admin, such
//     a job (like one with no open request) is NotFound.
//
// README.md in this directory is the operator's view of verifying tokens against an identity
// provider's JWK Set (jwks.go).
//
// It imports nothing of jobgate, Temporal or any driver: every other package may import it, so
// it must never import frontend, workflows, activities or cmd.
package authz
