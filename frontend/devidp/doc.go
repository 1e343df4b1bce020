// Package devidp is the development OpenID Provider that `jobgate dev` embeds.
//
// It is built on zitadel's certified pkg/op (never a hand-written OAuth
// server): this package only supplies the op.Storage (clients, auth
// requests, codes, refresh tokens, the signing key) and a dev-user picker
// in place of a password form. Its users are the dev principals handed in
// by cmd/app; the access tokens it issues are RS256 JWTs whose aud is the
// MCP resource URI and which carry the tenant and scope claims that
// authz.JWKSVerifier checks, so dev exercises the same verification path
// as production. Development only: anyone who can reach the login page can
// sign in as any dev user.
package devidp
