package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/jobgate/jobgate/frontend/handle"
)

// TestServeRefusesDevOnlySecrets: serve does not start with a secret marked DEV-ONLY — by its
// file's name, or by its content (compose mounts it at /run/secrets/<name>, losing the name) —
// unless --dev-deployment says this is a dev deployment.
func TestServeRefusesDevOnlySecrets(t *testing.T) {
	dir := t.TempDir()
	placeholder := func(name string) string { return filepath.Join("..", "deploy", "secrets", name) }
	// The committed placeholders, as compose mounts them: under a name without the marker.
	mounted := func(name string) string {
		b, err := os.ReadFile(placeholder(name))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "mounted-"+name[len("DEV-ONLY-"):])
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	own := filepath.Join(dir, "token-secret")
	if err := os.WriteFile(own, []byte(handle.GenerateKeyHex()), 0o600); err != nil {
		t.Fatal(err)
	}
	ownKeys := filepath.Join(dir, "handle-keys")
	if err := os.WriteFile(ownKeys, []byte("k1:"+handle.GenerateKeyHex()), 0o600); err != nil {
		t.Fatal(err)
	}
	devNamed := filepath.Join(dir, "DEV-ONLY-mine")
	if err := os.WriteFile(devNamed, []byte(handle.GenerateKeyHex()), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name                 string
		secretFile, keysFile string
		keys                 string
		dev                  bool
		resumeFile           string // --resume-keys-file; "" for none
		refused              string // "" = not refused for DEV-ONLY
	}{
		{"placeholder secret by path", placeholder("DEV-ONLY-token-hs256-secret"), ownKeys, "", false, "", "--hs256-secret-file"},
		{"placeholder secret mounted", mounted("DEV-ONLY-token-hs256-secret"), ownKeys, "", false, "", "--hs256-secret-file"},
		{"file named DEV-ONLY", devNamed, ownKeys, "", false, "", "--hs256-secret-file"},
		{"placeholder keys by path", own, placeholder("DEV-ONLY-handle-keys"), "", false, "", "--handle-keys-file"},
		{"placeholder keys mounted", own, mounted("DEV-ONLY-handle-keys"), "", false, "", "--handle-keys-file"},
		{"inline DEV-ONLY keys", own, "", "DEV-ONLY-1:" + handle.GenerateKeyHex(), false, "", "--handle-keys"},
		{"placeholders in a dev deployment", mounted("DEV-ONLY-token-hs256-secret"), mounted("DEV-ONLY-handle-keys"), "", true, "", ""},
		{"own secrets", own, ownKeys, "", false, "", ""},
		{"placeholder resume keys mounted", own, ownKeys, "", false, mounted("DEV-ONLY-resume-keys"), "--resume-keys-file"},
		{"placeholder resume keys in a dev deployment", own, ownKeys, "", true, mounted("DEV-ONLY-resume-keys"), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := &ServeMain{Config: withKeys(t, ServeConfig{Issuer: "https://issuer.example", ResourceURI: "http://localhost/mcp",
				Temporal:        TemporalConfig{Address: "127.0.0.1:1", Namespace: "default", TaskQueue: "tq"},
				HS256SecretFile: c.secretFile, HandleKeysFile: c.keysFile, HandleKeys: c.keys, DevDeployment: c.dev, ResumeKeysFile: c.resumeFile}),
				Logger: zap.NewNop()}
			if c.resumeFile == "" {
				m.Config.ResumeKeys = "r1:" + handle.GenerateKeyHex()
			}
			defer func() {
				if m.Client != nil {
					m.Client.Close()
				}
			}()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, err := m.build(ctx)
			wantDevOnlyRefusal(t, err, c.refused)
			if c.refused == "" && err != nil {
				t.Fatalf("build: %v", err)
			}
		})
	}
	// The compose stack's payload key-encryption key placeholder: its marker is in the key
	// itself (base64url), so it is refused mounted under any name, unless a dev deployment.
	for _, dev := range []bool{false, true} {
		c := withKeys(t, ServeConfig{Issuer: "https://issuer.example", ResourceURI: "http://localhost/mcp", HS256SecretFile: own,
			HandleKeysFile: ownKeys, ResumeKeys: "r1:" + handle.GenerateKeyHex(), DevDeployment: dev,
			Temporal: TemporalConfig{Address: "127.0.0.1:1", Namespace: "default", TaskQueue: "tq"}})
		c.Temporal.Payloads.KEK, c.Temporal.Payloads.KEKFile = "", mounted("DEV-ONLY-payload-kek")
		m := &ServeMain{Config: c, Logger: zap.NewNop()}
		_, err := m.build(context.Background())
		if m.Client != nil {
			m.Client.Close()
		}
		_ = m.closeKinds()
		if !dev {
			wantDevOnlyRefusal(t, err, "--payload-kek")
		} else if err != nil {
			t.Fatalf("payload KEK placeholder in a dev deployment: %v", err)
		}
	}
}

// wantDevOnlyRefusal checks err is a DEV-ONLY refusal naming flag and --dev-deployment, or, with
// flag "", that it is no DEV-ONLY refusal (other errors, such as no Temporal, are fine).
func wantDevOnlyRefusal(t *testing.T, err error, flag string) {
	t.Helper()
	refused := err != nil && strings.Contains(err.Error(), "DEV-ONLY placeholder")
	switch {
	case flag == "" && refused:
		t.Fatalf("refused: %v", err)
	case flag != "" && (!refused || !strings.HasPrefix(err.Error(), flag+":") || !strings.Contains(err.Error(), "--dev-deployment")):
		t.Fatalf("want a refusal naming %s and --dev-deployment, got %v", flag, err)
	}
}
