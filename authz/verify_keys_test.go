package authz

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestVerifyPublicKey(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var kidSeen string
	v, err := NewJWTVerifier(JWTOptions{
		Issuer: testIss, Audience: testAud, Methods: []string{"ES256", "RS256"}, Now: fixedNow,
		Keyfunc: func(tk *jwt.Token) (any, error) {
			kidSeen, _ = tk.Header["kid"].(string)
			if kidSeen != "k1" {
				return nil, errUnknownKid
			}
			return &key.PublicKey, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	es := func(kid string, c jwt.MapClaims) string {
		tk := jwt.NewWithClaims(jwt.SigningMethodES256, c)
		tk.Header["kid"] = kid
		s, err := tk.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	c, err := v.Verify(context.Background(), es("k1", baseClaims()))
	if err != nil || c.Principal.Tenant != "acme" {
		t.Fatalf("ES256 Verify = %+v, %v", c, err)
	}

	tok := es("k2-secret-looking-kid", baseClaims())
	_, err = v.Verify(context.Background(), tok)
	checkFailure(t, tok, err, reasonKeyLookup)
	if !errors.Is(err, errUnknownKid) {
		t.Errorf("keyfunc error not wrapped: %v", err)
	}
	if strings.Contains(err.Error(), "k2-secret") || strings.Contains(err.Error(), errUnknownKid.Error()) {
		t.Errorf("keyfunc error text leaked into %q", err)
	}

	// Algorithm confusion: HS256 "signed" with the public key bytes.
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	tok = sign(t, jwt.SigningMethodHS256, der, baseClaims())
	_, err = v.Verify(context.Background(), tok)
	checkFailure(t, tok, err, reasonAlgNotAllowed)

	// Allowed alg, wrong key type: still a signature failure, not a panic.
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rtk := jwt.NewWithClaims(jwt.SigningMethodRS256, baseClaims())
	rtk.Header["kid"] = "k1"
	tok, err = rtk.SignedString(rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Verify(context.Background(), tok)
	checkFailure(t, tok, err, reasonSignature)
}

var errUnknownKid = errors.New("jwks: no key with that kid")

func TestNewJWTVerifierOptions(t *testing.T) {
	kf := func(*jwt.Token) (any, error) { return testSecret, nil }
	ok := func() JWTOptions {
		return JWTOptions{Issuer: testIss, Audience: testAud, Methods: []string{"HS256"}, Keyfunc: kf}
	}
	for _, tt := range []struct {
		name  string
		edit  func(*JWTOptions)
		field string
	}{
		{"no issuer", func(o *JWTOptions) { o.Issuer = "" }, "Issuer"},
		{"no audience", func(o *JWTOptions) { o.Audience = "" }, "Audience"},
		{"reserved tenant claim", func(o *JWTOptions) { o.TenantClaim = "sub" }, "TenantClaim"},
		{"scope as tenant claim", func(o *JWTOptions) { o.TenantClaim = "scope" }, "TenantClaim"},
		{"no methods", func(o *JWTOptions) { o.Methods = nil }, "Methods"},
		{"none", func(o *JWTOptions) { o.Methods = []string{"HS256", "none"} }, "Methods"},
		{"NONE", func(o *JWTOptions) { o.Methods = []string{"NONE"} }, "Methods"},
		{"unknown alg", func(o *JWTOptions) { o.Methods = []string{"HS999"} }, "Methods"},
		{"mixed hmac and rsa", func(o *JWTOptions) { o.Methods = []string{"HS256", "RS256"} }, "Methods"},
		{"no keyfunc", func(o *JWTOptions) { o.Keyfunc = nil }, "Keyfunc"},
		{"negative leeway", func(o *JWTOptions) { o.Leeway = -time.Second }, "Leeway"},
		{"huge leeway", func(o *JWTOptions) { o.Leeway = time.Hour }, "Leeway"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := ok()
			tt.edit(&o)
			v, err := NewJWTVerifier(o)
			if err == nil || v != nil {
				t.Fatalf("NewJWTVerifier = %v, %v; want error", v, err)
			}
			if !strings.Contains(err.Error(), "JWTOptions."+tt.field) {
				t.Errorf("error %q does not name JWTOptions.%s", err, tt.field)
			}
		})
	}
	v, err := NewJWTVerifier(ok())
	if err != nil {
		t.Fatal(err)
	}
	if v.tenantClaim != TenantClaimDefault || v.now == nil {
		t.Errorf("defaults not applied: %+v", v)
	}
	if _, err := NewJWTVerifier(JWTOptions{Issuer: testIss, Audience: testAud, Methods: []string{"RS256", "ES256", "EdDSA", "PS256"}, Keyfunc: kf}); err != nil {
		t.Errorf("public-key methods refused: %v", err)
	}
}

func TestNilVerifier(t *testing.T) {
	var v *JWTVerifier
	_, err := v.Verify(context.Background(), "x.y.z")
	if !errors.Is(err, ErrInvalidToken) {
		t.Errorf("nil verifier: %v", err)
	}
}

func TestVerifyConcurrent(t *testing.T) {
	v := newTestVerifier(t)
	good := sign(t, jwt.SigningMethodHS256, testSecret, baseClaims())
	bad := sign(t, jwt.SigningMethodHS256, testSecret, with(baseClaims(), "iss", "x"))
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				if _, err := v.Verify(context.Background(), good); err != nil {
					t.Error(err)
					return
				}
				if _, err := v.Verify(context.Background(), bad); err == nil {
					t.Error("bad token accepted")
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestVerifyTypHeader: a typ header, when present, must name a JWT or an access token
// (case-insensitive, optional "application/" prefix); a token typed for another purpose and
// signed with the same key is refused.
func TestVerifyTypHeader(t *testing.T) {
	v := newTestVerifier(t)
	for _, c := range []struct {
		typ any // nil: no typ header
		ok  bool
	}{
		{nil, true}, {"JWT", true}, {"jwt", true}, {"at+jwt", true}, {"AT+JWT", true},
		{"application/at+jwt", true}, {"Application/JWT", true},
		{"id_token+jwt", false}, {"logout+jwt", false}, {"dpop+jwt", false}, {"JOSE", false},
		{"", false}, {"application/", false}, {"JWT ", false}, {42, false}, {[]any{"JWT"}, false},
	} {
		tk := jwt.NewWithClaims(jwt.SigningMethodHS256, baseClaims())
		if c.typ == nil {
			delete(tk.Header, "typ")
		} else {
			tk.Header["typ"] = c.typ
		}
		s, err := tk.SignedString(testSecret)
		if err != nil {
			t.Fatal(err)
		}
		_, err = v.Verify(context.Background(), s)
		if c.ok && err != nil {
			t.Errorf("typ %#v: %v", c.typ, err)
		}
		if !c.ok {
			checkFailure(t, s, err, reasonTyp)
		}
	}
}
