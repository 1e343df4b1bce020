package authz_test

import (
	"context"
	"fmt"

	"github.com/jobgate/jobgate/authz"
)

func Example() {
	secret := []byte("dev-secret-dev-secret-dev-secret") // >= 32 bytes
	const iss, aud = "https://issuer.example", "https://jobs.example/mcp"

	// At startup: one verifier. (`jobgate token` mints with the same settings.)
	v, err := authz.NewHS256Verifier(iss, aud, secret, "")
	if err != nil {
		panic(err)
	}
	tok, err := authz.MintHS256(secret, authz.MintOptions{
		Issuer: iss, Audience: aud, Tenant: "acme", Subject: "alice",
		Scopes: []authz.Scope{authz.ScopeRead, authz.ScopeWrite},
	})
	if err != nil {
		panic(err)
	}

	// Per request: verify, then gate the tool by scope, then decide on the job.
	claims, err := v.Verify(context.Background(), tok)
	if err != nil {
		fmt.Println("401:", err)
		return
	}
	p := claims.Principal
	fmt.Println("caller:", p.Tenant, p.Subject, p.Scopes)

	if need := authz.ActionScopes(authz.ActionResume); !p.HasAny(need...) {
		fmt.Println("403 insufficient_scope:", need[0])
	}

	mine := authz.Job{Tenant: "acme", Owner: "alice"}
	bobs := authz.Job{Tenant: "acme", Owner: "bob", OpenInput: authz.ApproverApprover}
	theirs := authz.Job{Tenant: "globex", Owner: "alice"}
	fmt.Println("cancel mine:", authz.Decide(p, authz.ActionCancel, mine))
	fmt.Println("get bob's:", authz.Decide(p, authz.ActionGet, bobs))
	fmt.Println("get other tenant's:", authz.Decide(p, authz.ActionGet, theirs))
	fmt.Println("list whole tenant:", authz.ListAll(p))

	forged, _ := authz.MintHS256([]byte("not-the-secret-not-the-secret-!!"), authz.MintOptions{
		Issuer: iss, Audience: aud, Tenant: "acme", Subject: "mallory", Scopes: authz.AllScopes(),
	})
	_, err = v.Verify(context.Background(), forged)
	fmt.Println("401:", err)

	// Output:
	// caller: acme alice [jobs:read jobs:write]
	// cancel mine: allow
	// get bob's: not_found
	// get other tenant's: not_found
	// list whole tenant: false
	// 401: invalid token: signature verification failed
}

func ExampleParseScopes() {
	scopes, err := authz.ParseScopes("jobs:write,jobs:read jobs:write")
	fmt.Println(scopes, err)
	_, err = authz.ParseScopes("jobs:read jobs:delete")
	fmt.Println(err)
	// Output:
	// [jobs:read jobs:write] <nil>
	// unknown scope "jobs:delete" (known: jobs:read, jobs:write, jobs:approve, jobs:admin)
}

// Two issuers side by side, as in dev: `jobgate token` HS256 tokens and a
// second issuer (here HS256 too, to stay offline; in dev a JWKS verifier).
func ExampleNewMultiVerifier() {
	const aud = "https://jobs.example/mcp"
	devSecret := []byte("dev-secret-dev-secret-dev-secret")
	idpSecret := []byte("idp-secret-idp-secret-idp-secret")
	dev, _ := authz.NewHS256Verifier("jobgate-dev", aud, devSecret, "")
	idp, _ := authz.NewHS256Verifier("https://idp.example", aud, idpSecret, "")
	v, err := authz.NewMultiVerifier(dev, idp)
	if err != nil {
		panic(err)
	}
	mint := func(secret []byte, iss string) string {
		tok, _ := authz.MintHS256(secret, authz.MintOptions{Issuer: iss, Audience: aud, Tenant: "acme", Subject: "ana"})
		return tok
	}
	for _, tok := range []string{
		mint(devSecret, "jobgate-dev"),
		mint(idpSecret, "https://idp.example"),
		mint(devSecret, "https://idp.example"), // the idp's name, the dev key
		mint(devSecret, "https://other.example"),
	} {
		c, err := v.Verify(context.Background(), tok)
		fmt.Println(c.Issuer, err)
	}
	// Output:
	// jobgate-dev <nil>
	// https://idp.example <nil>
	//  invalid token: signature verification failed
	//  invalid token: wrong issuer
}
