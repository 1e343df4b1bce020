package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/workflows"
)

// testSigningKeys is a signing keyring for tests that are not about it.
var testSigningKeys = "s1:" + strings.Repeat("5e", 32)

// withKeys is c with the keys serve requires beside those a test is about: a signing keyring
// and a payload key-encryption key over a fresh key store. What the test set is kept.
func withKeys(t testing.TB, c ServeConfig) ServeConfig {
	if c.SigningKeys == "" && c.SigningKeysFile == "" {
		c.SigningKeys = testSigningKeys
	}
	c.Temporal = withPayloadKEK(t, c.Temporal)
	return c
}

// withWorkerKeys is withKeys for a worker.
func withWorkerKeys(t testing.TB, c WorkerConfig) WorkerConfig {
	if c.SigningKeys == "" && c.SigningKeysFile == "" {
		c.SigningKeys = testSigningKeys
	}
	c.Temporal = withPayloadKEK(t, c.Temporal)
	return c
}

// withPayloadKEK is tc with a fresh local key-encryption key (unless it names one) and, unless
// it names one, a key store of its own.
func withPayloadKEK(t testing.TB, tc TemporalConfig) TemporalConfig {
	if !tc.Payloads.Enabled() {
		tc.Payloads.KEK = payloadcrypt.NewLocalKEK()
	}
	if tc.Payloads.StoreURL == "" {
		tc.Payloads.StoreURL = "file://" + t.TempDir()
	}
	return tc
}

// TestServeRequiresSigningAndPayloadKeys: serve refuses to start without signing keys and
// without a payload key-encryption key, each with the error naming the flags and how to make
// the key; with both it starts. InsecureClearPayloads (code only) lets it start in clear.
func TestServeRequiresSigningAndPayloadKeys(t *testing.T) {
	base := ServeConfig{Temporal: TemporalConfig{Address: deadAddr(t), Namespace: "default"}, Listen: "127.0.0.1:0",
		ResourceURI: "http://localhost/mcp", Issuer: "iss", HS256SecretFile: writeTemp(t, "hs256", strings.Repeat("s", 32)),
		HandleKeys: "k1:" + strings.Repeat("ab", 32), ResumeKeys: "r1:" + strings.Repeat("cd", 32)}
	noSigning := withKeys(t, base)
	noSigning.SigningKeys = ""
	noKEK := withKeys(t, base)
	noKEK.Temporal.Payloads = payloadcrypt.Config{}
	clear := noKEK
	clear.Temporal.InsecureClearPayloads = true
	for _, tc := range []struct {
		name string
		c    ServeConfig
		want string // "" = starts
	}{
		{"no signing keys", noSigning, "--signing-keys or --signing-keys-file is required (frontends sign every decision record with them; give the workers the same keys; make one with `jobgate keygen signing-keys`)"},
		{"no payload kek", noKEK, ErrNoPayloadKEK.Error()},
		{"both", withKeys(t, base), ""},
		{"insecure clear payloads", clear, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &ServeMain{Config: tc.c}
			err := s.Run(context.Background())
			defer s.Close()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if (s.Config.Temporal.PayloadKeys() == nil) != tc.c.Temporal.InsecureClearPayloads || s.SigningKeys == nil {
					t.Fatalf("started with payload keys %v, signing keys %v", s.Config.Temporal.PayloadKeys(), s.SigningKeys)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Run: %v\nwant: %s", err, tc.want)
			}
		})
	}
}

// TestWorkerRequiresSigningAndPayloadKeys: a worker refuses to start without a payload
// key-encryption key (every worker reads sealed payloads) and, when it serves exports (it signs
// their manifests), without signing keys; an episode worker (--kinds eval) needs no signing
// keys. Temporal is down, so "starts" is as far as connecting: the keys were accepted.
func TestWorkerRequiresSigningAndPayloadKeys(t *testing.T) {
	base := WorkerConfig{Temporal: TemporalConfig{Address: deadAddr(t), Namespace: "default"},
		ArtifactsURL: "file://" + t.TempDir(), ResumeKeys: "r1:" + strings.Repeat("cd", 32)}
	noSigning := withWorkerKeys(t, base)
	noSigning.SigningKeys = ""
	noKEK := withWorkerKeys(t, base)
	noKEK.Temporal.Payloads = payloadcrypt.Config{}
	episodes := WorkerConfig{Temporal: withPayloadKEK(t, base.Temporal), Kinds: []string{workflows.KindEval}}
	episodesNoKEK := episodes
	episodesNoKEK.Temporal.Payloads = payloadcrypt.Config{}
	for _, tc := range []struct {
		name string
		c    WorkerConfig
		want string // "" = keys accepted
	}{
		{"no signing keys", noSigning, "--signing-keys or --signing-keys-file is required (a worker serving exports signs every manifest with serve's signing keys; make one with `jobgate keygen signing-keys`)"},
		{"no payload kek", noKEK, ErrNoPayloadKEK.Error()},
		{"episode worker without payload kek", episodesNoKEK, ErrNoPayloadKEK.Error()},
		{"episode worker without signing keys", episodes, ""},
		{"both", withWorkerKeys(t, base), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			m := &WorkerMain{Config: tc.c}
			err := m.Run(ctx)
			defer m.Close()
			if tc.want == "" {
				// Past the keys, the dial of the dead Temporal is what fails.
				if err == nil || errors.Is(err, ErrNoPayloadKEK) || strings.Contains(err.Error(), "keys") || m.Config.Temporal.PayloadKeys() == nil {
					t.Fatalf("Run: %v (payload keys %v), want the keys accepted and the dial to fail", err, m.Config.Temporal.PayloadKeys())
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Run: %v\nwant: %s", err, tc.want)
			}
		})
	}
}
