package authz

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/tests/support/testenv"

	"github.com/golang-jwt/jwt/v5"
)

// fuzzMultiSeeds are the committed seeds of FuzzMultiVerify
// (testdata/fuzz/FuzzMultiVerify), deterministic (HMAC and Ed25519 with fixed
// keys, fixed time). Only the valid_* ones verify under newTestMulti.
func fuzzMultiSeeds(t testing.TB) map[string]string {
	ed := testKeys().ed
	return map[string]string{
		"valid_a":        sign(t, jwt.SigningMethodHS256, testSecret, issClaims(multiIssA)),
		"valid_b":        sign(t, jwt.SigningMethodHS256, multiSecretB, issClaims(multiIssB)),
		"valid_c":        signKid(t, jwt.SigningMethodEdDSA, ed, "ed1", issClaims(multiIssC)),
		"a_signed_by_b":  sign(t, jwt.SigningMethodHS256, multiSecretB, issClaims(multiIssA)),
		"c_signed_by_a":  signKid(t, jwt.SigningMethodHS256, testSecret, "ed1", issClaims(multiIssC)),
		"a_signed_by_c":  signKid(t, jwt.SigningMethodEdDSA, ed, "ed1", issClaims(multiIssA)),
		"unknown_iss":    sign(t, jwt.SigningMethodHS256, testSecret, issClaims("https://evil.example")),
		"no_iss":         sign(t, jwt.SigningMethodHS256, testSecret, with(baseClaims(), "iss", nil)),
		"iss_array":      sign(t, jwt.SigningMethodHS256, testSecret, with(baseClaims(), "iss", []any{multiIssA})),
		"id_token_c":     signKid(t, jwt.SigningMethodEdDSA, ed, "ed1", with(issClaims(multiIssC), "nonce", "n-0S6_WzA2Mj")),
		"duplicate_iss":  b64(`{"alg":"HS256"}`) + "." + b64(`{"iss":"`+multiIssA+`","iss":"`+multiIssB+`"}`) + ".c2ln",
		"garbage":        "a.b.c",
		"payload_not_js": b64(`{"alg":"HS256"}`) + "." + b64(`not json`) + ".c2ln",
	}
}

func FuzzMultiVerify(f *testing.F) {
	m := newTestMulti(f)
	for _, s := range fuzzMultiSeeds(f) {
		f.Add(s)
	}
	a := hsVerifier(f, multiIssA, testSecret)
	allowed := allowedReasons()
	f.Fuzz(func(t *testing.T, token string) {
		c, err := m.Verify(context.Background(), token)
		checkVerifyResult(t, token, c, err, allowed)
		if err == nil && c.Issuer != multiIssA && c.Issuer != multiIssB && c.Issuer != multiIssC {
			t.Fatalf("accepted issuer %q", c.Issuer)
		}
		// A token naming issuer A gets exactly A's verifier's answer.
		mc := jwt.MapClaims{}
		if _, _, perr := peekParser.ParseUnverified(token, mc); (perr == nil || errors.Is(perr, jwt.ErrTokenUnverifiable)) && mc["iss"] == multiIssA && len(token) <= MaxTokenBytes {
			ca, ea := a.Verify(context.Background(), token)
			if (err == nil) != (ea == nil) || err != nil && err.Error() != ea.Error() || c.Principal.Subject != ca.Principal.Subject {
				t.Fatalf("multi answered %+v, %v; A's verifier %+v, %v", c, err, ca, ea)
			}
		}
	})
}

// TestMultiFuzzSeedCorpus keeps the committed corpus of FuzzMultiVerify equal
// to fuzzMultiSeeds, with only the valid_* seeds verifying, each under its
// own issuer.
func TestMultiFuzzSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzMultiVerify")
	want := fuzzMultiSeeds(t)
	// WRITE_FUZZ_SEEDS=1 regenerates the corpus after a deliberate change.
	testenv.SeedCorpus(t, dir, want, os.Getenv("WRITE_FUZZ_SEEDS") == "1", true)
	m := newTestMulti(t)
	for name, w := range want {
		c, err := m.Verify(context.Background(), w)
		valid := strings.HasPrefix(name, "valid_")
		if valid != (err == nil) {
			t.Errorf("seed %s: Verify error = %v", name, err)
		}
		if valid && c.Issuer != map[string]string{"valid_a": multiIssA, "valid_b": multiIssB, "valid_c": multiIssC}[name] {
			t.Errorf("seed %s: issuer %q", name, c.Issuer)
		}
	}
}
