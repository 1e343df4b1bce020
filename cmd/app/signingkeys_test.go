package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeSigningKeys: serve reads --signing-keys-file like the resume keys, refuses a bad
// ring or a DEV-ONLY placeholder (outside dev deployments) naming the flag, and serves the
// public half as a JWK set at /.well-known/jobgate-signing-keys, without a token and without
// any private part.
func TestServeSigningKeys(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "hs256")
	good := filepath.Join(dir, "signing-keys")
	placeholder := filepath.Join(dir, "DEV-ONLY-signing-keys")
	for p, b := range map[string]string{secret: strings.Repeat("s", 32), good: "s2:" + strings.Repeat("cd", 32) + ",s1:" + strings.Repeat("ef", 32) + "\n",
		placeholder: "s1:" + strings.Repeat("cd", 32)} {
		if err := os.WriteFile(p, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, spec, file, want string // want "" = starts
	}{
		{"missing", "", "", "--signing-keys or --signing-keys-file is required"},
		{"short seed", "s1:abcd", "", "--signing-keys: handle: signing keyring entry 1"},
		{"missing file", "", filepath.Join(dir, "nope"), "--signing-keys-file"},
		{"placeholder", "", placeholder, "--signing-keys-file: the secret is a public DEV-ONLY placeholder"},
		{"file", "", good, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &ServeMain{Config: ServeConfig{Temporal: withPayloadKEK(t, TemporalConfig{Address: "127.0.0.1:1", Namespace: "default"}),
				Listen: "127.0.0.1:0", ResourceURI: "http://localhost/mcp", Issuer: "iss", HS256SecretFile: secret,
				HandleKeys: "k1:" + strings.Repeat("ab", 32), ResumeKeys: "r1:" + strings.Repeat("ab", 32),
				SigningKeys: tc.spec, SigningKeysFile: tc.file}}
			err := s.Run(context.Background())
			defer s.Close()
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Run: %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			resp, err := http.Get("http://" + s.Addr() + "/.well-known/jobgate-signing-keys")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			var set struct {
				Keys []map[string]string `json:"keys"`
			}
			if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &set) != nil || len(set.Keys) != 2 ||
				set.Keys[0]["kid"] != "s1" || set.Keys[1]["kid"] != "s2" || set.Keys[0]["kty"] != "OKP" || strings.Contains(string(body), `"d"`) {
				t.Fatalf("GET signing keys: %d %s", resp.StatusCode, body)
			}
		})
	}
}
