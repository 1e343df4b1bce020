package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeResumeKeys: serve refuses to start without resume keys, or with a bad keyring, and
// says which flag; a keys file is read like --handle-keys-file.
func TestServeResumeKeys(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "hs256")
	if err := os.WriteFile(secret, []byte(strings.Repeat("s", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "resume-keys")
	if err := os.WriteFile(good, []byte("r1:"+strings.Repeat("cd", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		spec, file string
		want       string // "" = starts
	}{
		{"missing", "", "", "--resume-keys or --resume-keys-file is required"},
		{"short key", "r1:abcd", "", "--resume-keys: handle: keyring entry 1"},
		{"missing file", "", filepath.Join(dir, "nope"), "--resume-keys-file"},
		{"file", "", good, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &ServeMain{Config: withKeys(t, ServeConfig{Temporal: TemporalConfig{Address: "127.0.0.1:1", Namespace: "default"},
				Listen: "127.0.0.1:0", ResourceURI: "http://localhost/mcp", Issuer: "iss", HS256SecretFile: secret,
				HandleKeys: "k1:" + strings.Repeat("ab", 32), ResumeKeys: tc.spec, ResumeKeysFile: tc.file})}
			err := s.Run(context.Background())
			defer s.Close()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if s.ResumeKeys == nil || s.ResumeKeys.CurrentKID() != "r1" {
					t.Fatalf("resume keys %v", s.ResumeKeys)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v, want %q", err, tc.want)
			}
		})
	}
}
