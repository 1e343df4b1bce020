package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

// The CLI's new parsers: a token's claims (readTokenInfo, fed by an IdP or by the person's
// JOBGATE_TOKEN), the token store file (loadTokens) and URLs compared by sameURL. None may
// panic on any input; what they accept must be consistent.

func jwtOf(claims string) string {
	return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".c2ln"
}

func fuzzTokenSeeds() map[string]string {
	return map[string]string{
		"good":          jwtOf(`{"iss":"http://i/oidc","sub":"ana","aud":["http://r/mcp","jobgate-cli"],"tenant":"acme","scope":"jobs:read","exp":1796103069,"iat":1796103054}`),
		"aud_string":    jwtOf(`{"iss":"i","sub":"s","aud":"http://r/mcp","tenant":"t","scp":["jobs:read"]}`),
		"no_tenant":     jwtOf(`{"iss":"i","sub":"s","aud":"a"}`),
		"tenant_number": jwtOf(`{"tenant":7,"exp":"soon","iat":-1}`),
		"huge_exp":      jwtOf(`{"exp":1e400,"iat":9007199254740993}`),
		"array":         jwtOf(`[1,2]`),
		"opaque":        "abc",
		"two_parts":     "a.b",
		"bad_base64":    "a.!!!.c",
		"empty":         "",
	}
}

func FuzzReadTokenInfo(f *testing.F) {
	for _, s := range fuzzTokenSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		i, m, err := readTokenInfo(tok, "tenant")
		if (err == nil) != (i != nil && m != nil) {
			t.Fatalf("readTokenInfo(%q) = %v, %v, %v", tok, i, m, err)
		}
		if err != nil {
			return
		}
		// What whoami shows comes from the claims as they are.
		if ten, _ := m["tenant"].(string); ten != i.Tenant {
			t.Fatalf("tenant %q, claims say %q", i.Tenant, ten)
		}
		// checkAccessToken never accepts what has no tenant, wrong iss or aud.
		if _, err := checkAccessToken(tok, "http://i/oidc", "http://r/mcp", "tenant", time.Unix(1796103060, 0)); err == nil {
			if i.Tenant == "" || i.Issuer != "http://i/oidc" {
				t.Fatalf("checkAccessToken accepted %+v", i)
			}
		}
	})
}

// TestFuzzSeedCorpus keeps testdata/fuzz/FuzzReadTokenInfo equal to fuzzTokenSeeds
// (WRITE_FUZZ_SEEDS=1 rewrites it) and checks the one seed that must pass does.
func TestFuzzSeedCorpus(t *testing.T) {
	seeds := fuzzTokenSeeds()
	testenv.SeedCorpus(t, filepath.Join("testdata", "fuzz", "FuzzReadTokenInfo"), seeds, os.Getenv("WRITE_FUZZ_SEEDS") == "1", true)
	for name, s := range seeds {
		_, err := checkAccessToken(s, "http://i/oidc", "http://r/mcp", "tenant", time.Unix(1796103060, 0))
		if (name == "good") != (err == nil) {
			t.Errorf("seed %s: %v", name, err)
		}
	}
	files := fuzzStoreSeeds()
	testenv.SeedCorpus(t, filepath.Join("testdata", "fuzz", "FuzzTokenFile"), files, os.Getenv("WRITE_FUZZ_SEEDS") == "1", true)
}

func fuzzStoreSeeds() map[string]string {
	l := storedLogin{Issuer: "http://i/oidc", Resource: "http://r/mcp", URL: "http://r/mcp", ClientID: "jobgate-cli", AccessToken: "a", RefreshToken: "r"}
	b, _ := json.Marshal(tokenFile{Version: 1, Logins: []storedLogin{l}})
	return map[string]string{
		"good":        string(b),
		"empty":       `{"version":1}`,
		"null_logins": `{"version":1,"logins":null}`,
		"version_0":   `{"logins":[]}`,
		"not_json":    `{"version":1,`,
		"wrong_types": `{"version":"1","logins":{}}`,
		"bad_url":     `{"version":1,"logins":[{"issuer":"i","resource":"%zz","url":"::"}]}`,
	}
}

// FuzzTokenFile: any store file is read or refused, never a panic; what is read survives a
// save and finds its logins again.
func FuzzTokenFile(f *testing.F) {
	for _, s := range fuzzStoreSeeds() {
		f.Add(s)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, body string) {
		path := filepath.Join(dir, "tokens.json")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		tf, err := loadTokens(path)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("a multi-line error: %q", err)
			}
			return
		}
		for _, l := range tf.Logins {
			_ = tf.forURL(l.URL)
			_ = sameURL(l.URL, l.Resource)
		}
		if err := saveTokens(path, tf); err != nil {
			t.Fatal(err)
		}
		again, err := loadTokens(path)
		if err != nil || len(again.Logins) != len(tf.Logins) {
			t.Fatalf("saved store does not read back: %v (%d vs %d logins)", err, len(again.Logins), len(tf.Logins))
		}
	})
}
