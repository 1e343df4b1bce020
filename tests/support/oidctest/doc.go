// Package oidctest runs a second, independent OpenID Provider for tests: the OpenID Certified npm
// package oidc-provider (tests/oidcidp/idp.mjs), a separate Node.js process configured by the
// test with users, clients and resource indicators, and gives a test the means to act as the
// human in front of it: pick a user on the login page, deny, approve or abort a device code.
//
// It exists so that jobgate's login flows, its JWKS verification and MCP clients' own login are
// proved against a provider jobgate did not write (the dev IdP in frontend/devidp is the other).
// It is a test-support package like tests/support/pgtest: tests in tests/ and other packages' tests
// may import it; production code never does.
//
// Node.js (20+) must be on PATH and tests/oidcidp/node_modules installed (`npm ci` there; Start
// runs it itself when npm is on PATH). Without them, or with -short, a test is skipped, except
// under CI=true, where it fails (tests/support/testenv).
//
// # Happy path
//
//	p := oidctest.Start(t, oidctest.Config{
//		Resource: "http://127.0.0.1:8080/mcp",
//		Users:    []oidctest.User{{Sub: "ana", Tenant: "acme", Scopes: []string{"jobs:read"}}},
//		Clients:  []oidctest.Client{oidctest.PublicClient("jobgate-cli")},
//	})
//	// p.Issuer, p.JWKSURL: configure jobgate (--issuer, --jwks-url) or a relying party with them.
//	redirect := p.Login(t, nil, authorizeURL, "ana") // the client's redirect URL with ?code=…
//	p.ApproveDevice(t, verificationURIComplete, "ana")
//
// # Guarantees
//
//   - Each Start is its own process, signing key (RS256) and port; it is killed when t ends.
//   - Access tokens for a configured resource are JWTs (typ at+jwt) with aud = that resource,
//     scope = the requested scopes the user has, and the user's claims (tenant, …); a user
//     configured without a tenant gets a token without the tenant claim.
//   - Every client allowed the refresh_token grant gets a refresh token (offline_access or not).
//
// Test support: only tests import it, never non-test code; of jobgate it imports only
// tests/support/testenv.
package oidctest
