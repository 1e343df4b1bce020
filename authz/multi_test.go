package authz

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const (
	multiIssA = "http://localhost:8080/jobgate-dev" // HS256, like `jobgate token`
	multiIssB = "https://b.example"                 // HS256 with another secret
	multiIssC = "http://localhost:8080/oidc"        // JWKS, like the dev IdP
)

var multiSecretB = []byte("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")

func hsVerifier(t testing.TB, iss string, secret []byte) *JWTVerifier {
	t.Helper()
	v, err := NewJWTVerifier(JWTOptions{
		Issuer: iss, Audience: testAud, Methods: []string{"HS256"},
		Keyfunc: func(*jwt.Token) (any, error) { return secret, nil }, Now: fixedNow,
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// newTestMulti: A and B are HS256 with different secrets, C is a JWKS
// verifier over allKeys.
func newTestMulti(t testing.TB) *MultiVerifier {
	t.Helper()
	srv := newJWKSServer(t, allKeys()...)
	c := mustJWKS(t, srv.URL, func(o *JWKSOptions) { o.Issuer = multiIssC })
	m, err := NewMultiVerifier(hsVerifier(t, multiIssA, testSecret), hsVerifier(t, multiIssB, multiSecretB), c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func issClaims(iss string) jwt.MapClaims { return with(baseClaims(), "iss", iss) }

func TestMultiVerifier(t *testing.T) {
	m := newTestMulti(t)
	k := testKeys()
	if got := m.Issuers(); !slices.Equal(got, []string{multiIssA, multiIssC, multiIssB}) {
		t.Fatalf("Issuers() = %v", got)
	}
	for _, tt := range []struct {
		name   string
		token  string
		iss    string // on success
		reason string // "" means success
	}{
		{"A signed by A", sign(t, jwt.SigningMethodHS256, testSecret, issClaims(multiIssA)), multiIssA, ""},
		{"B signed by B", sign(t, jwt.SigningMethodHS256, multiSecretB, issClaims(multiIssB)), multiIssB, ""},
		{"C signed by C (RS256)", signKid(t, jwt.SigningMethodRS256, k.rsa, "rsa1", issClaims(multiIssC)), multiIssC, ""},
		{"C signed by C (EdDSA)", signKid(t, jwt.SigningMethodEdDSA, k.ed, "ed1", issClaims(multiIssC)), multiIssC, ""},
		{"A signed with B's key", sign(t, jwt.SigningMethodHS256, multiSecretB, issClaims(multiIssA)), "", reasonSignature},
		{"B signed with A's key", sign(t, jwt.SigningMethodHS256, testSecret, issClaims(multiIssB)), "", reasonSignature},
		{"C signed with A's HS256 secret", signKid(t, jwt.SigningMethodHS256, testSecret, "rsa1", issClaims(multiIssC)), "", reasonAlgNotAllowed},
		{"A signed with C's RSA key", signKid(t, jwt.SigningMethodRS256, k.rsa, "rsa1", issClaims(multiIssA)), "", reasonAlgNotAllowed},
		{"unknown issuer signed with A's key", sign(t, jwt.SigningMethodHS256, testSecret, issClaims("https://evil.example")), "", reasonIssuer},
		{"issuer differs in case", sign(t, jwt.SigningMethodHS256, testSecret, issClaims(strings.ToUpper(multiIssA))), "", reasonIssuer},
		{"no iss", sign(t, jwt.SigningMethodHS256, testSecret, with(baseClaims(), "iss", nil)), "", reasonMissingIss},
		{"iss not a string", sign(t, jwt.SigningMethodHS256, testSecret, with(baseClaims(), "iss", []any{multiIssA})), "", reasonClaimType},
		{"ID token of C", signKid(t, jwt.SigningMethodRS256, k.rsa, "rsa1", with(issClaims(multiIssC), "nonce", "n1", "at_hash", "x")), "", reasonIDToken},
		{"expired A", sign(t, jwt.SigningMethodHS256, testSecret, with(issClaims(multiIssA), "exp", testNow.Add(-time.Hour).Unix())), "", reasonExpired},
		{"garbage", "a.b.c", "", reasonMalformed},
		{"empty", "", "", reasonEmpty},
		{"too long", strings.Repeat("a", MaxTokenBytes+1), "", reasonTooLarge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := m.Verify(context.Background(), tt.token)
			if tt.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.Issuer != tt.iss || c.Principal.Subject != "alice" || c.Principal.Tenant != "acme" {
					t.Fatalf("claims %+v", c)
				}
				return
			}
			if !errors.Is(err, ErrInvalidToken) || err.Error() != "invalid token: "+tt.reason {
				t.Fatalf("err = %v, want %q", err, tt.reason)
			}
			if c.Issuer != "" || c.Principal.Subject != "" || !c.Expiry.IsZero() {
				t.Fatalf("claims %+v on failure", c)
			}
		})
	}
}

func TestNewMultiVerifierErrors(t *testing.T) {
	a := hsVerifier(t, multiIssA, testSecret)
	for _, tt := range []struct {
		name string
		vs   []IssuerVerifier
		want string
	}{
		{"none", nil, "at least one"},
		{"typed nil", []IssuerVerifier{a, (*JWTVerifier)(nil)}, "verifier 1 has no issuer"},
		{"nil interface", []IssuerVerifier{nil}, "verifier 0 is nil"},
		{"zero JWKS verifier", []IssuerVerifier{&JWKSVerifier{}}, "verifier 0 has no issuer"},
		{"duplicate", []IssuerVerifier{a, hsVerifier(t, multiIssA, multiSecretB)}, `issuer "` + multiIssA + `" is given twice`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := NewMultiVerifier(tt.vs...)
			if err == nil || m != nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewMultiVerifier = %v, %v; want error containing %q", m, err, tt.want)
			}
		})
	}
	var nilM *MultiVerifier
	if _, err := nilM.Verify(context.Background(), "x"); err == nil || err.Error() != "invalid token: "+reasonNilVerifier {
		t.Fatalf("nil MultiVerifier: %v", err)
	}
}

// stubIssuerVerifier answers fixed claims, to test the guard on what a
// Verifier other than this package's reports.
type stubIssuerVerifier struct {
	iss string
	c   Claims
}

func (s stubIssuerVerifier) Issuer() string { return s.iss }
func (s stubIssuerVerifier) Verify(context.Context, string) (Claims, error) {
	return s.c, nil
}

func TestMultiVerifierIssuerGuard(t *testing.T) {
	p := Principal{Tenant: "acme", Subject: "alice", Scopes: []Scope{}}
	tok := sign(t, jwt.SigningMethodHS256, testSecret, issClaims(multiIssB))
	m, err := NewMultiVerifier(stubIssuerVerifier{iss: multiIssB, c: Claims{Principal: p}})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := m.Verify(context.Background(), tok); err != nil || c.Issuer != multiIssB {
		t.Fatalf("unreported issuer not filled in: %+v, %v", c, err)
	}
	m, err = NewMultiVerifier(stubIssuerVerifier{iss: multiIssB, c: Claims{Principal: p, Issuer: multiIssA}})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := m.Verify(context.Background(), tok); err == nil || err.Error() != "invalid token: "+reasonIssuer {
		t.Fatalf("mismatched issuer accepted: %+v, %v", c, err)
	}
}

// TestMultiVerifierAnswersAsTheIssuersVerifier: for a token naming a known
// issuer, the answer is exactly that issuer's verifier's, whatever is wrong
// with the token.
func TestMultiVerifierAnswersAsTheIssuersVerifier(t *testing.T) {
	m := newTestMulti(t)
	a := hsVerifier(t, multiIssA, testSecret)
	valid := sign(t, jwt.SigningMethodHS256, testSecret, issClaims(multiIssA))
	payload := b64(`{"iss":"` + multiIssA + `","sub":"alice","tenant":"acme","aud":"` + testAud + `","exp":1893553445}`)
	for name, tok := range map[string]string{
		"valid":       valid,
		"alg none":    b64(`{"alg":"none"}`) + "." + payload + ".",
		"alg unknown": b64(`{"alg":"XS512"}`) + "." + payload + ".c2ln",
		"no alg":      b64(`{"typ":"JWT"}`) + "." + payload + ".c2ln",
		"bad typ":     b64(`{"alg":"HS256","typ":"id_token+jwt"}`) + "." + payload + ".c2ln",
		"id token":    sign(t, jwt.SigningMethodHS256, testSecret, with(issClaims(multiIssA), "c_hash", "x")),
		"wrong aud":   sign(t, jwt.SigningMethodHS256, testSecret, with(issClaims(multiIssA), "aud", "https://other.example")),
		"no tenant":   sign(t, jwt.SigningMethodHS256, testSecret, with(issClaims(multiIssA), "tenant", nil)),
		"bad sig":     valid[:len(valid)-4] + "AAAA",
	} {
		cm, em := m.Verify(context.Background(), tok)
		ca, ea := a.Verify(context.Background(), tok)
		if (em == nil) != (ea == nil) || em != nil && em.Error() != ea.Error() || cm.Issuer != ca.Issuer || cm.Principal.Subject != ca.Principal.Subject {
			t.Errorf("%s: multi = %+v, %v; A's verifier = %+v, %v", name, cm, em, ca, ea)
		}
	}
}
