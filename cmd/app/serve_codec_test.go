package app

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
)

// TestServeCodecServer: serve with payload keys mounts /codec/ (401 without a token, its
// preflight answered for --codec-cors-origin only); a malformed origin fails start-up naming
// the flag; without payload keys there is no codec server.
func TestServeCodecServer(t *testing.T) {
	keys := func() *handle.Keyring {
		k, err := handle.NewKeyring("k1", map[string][]byte{"k1": handle.GenerateKey()})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	start := func(origins string, sealed bool) (*ServeMain, error) {
		v, err := authz.NewHS256Verifier("iss", "http://localhost:8080/mcp", []byte(handle.GenerateKeyHex()), "")
		if err != nil {
			t.Fatal(err)
		}
		tc := TemporalConfig{Address: "127.0.0.1:1", Namespace: "default", TaskQueue: "q"}
		if sealed {
			tc.Payloads = payloadcrypt.Config{KEK: payloadcrypt.NewLocalKEK(), StoreURL: "mem://"}
		} else {
			tc.InsecureClearPayloads = true // a pre-encryption deployment (code only)
		}
		m := &ServeMain{Config: ServeConfig{Temporal: tc, Listen: "127.0.0.1:0", ResourceURI: "http://localhost:8080/mcp", Issuer: "iss",
			CodecCORSOrigins: origins, SigningKeys: testSigningKeys}, Verifier: v, Keys: keys(), ResumeKeys: keys()}
		err = m.Run(context.Background())
		if err == nil {
			t.Cleanup(func() { _ = m.Close() })
		}
		return m, err
	}
	if _, err := start("https://ui.example/path", true); err == nil || !strings.Contains(err.Error(), "--codec-cors-origin") {
		t.Fatalf("a malformed origin: %v", err)
	}
	m, err := start("https://ui.example, https://ui2.example/", true)
	if err != nil {
		t.Fatal(err)
	}
	do := func(m *ServeMain, method, origin string) *http.Response {
		req, _ := http.NewRequest(method, "http://"+m.Addr()+"/codec/decode", strings.NewReader(`{"payloads":[]}`))
		if origin != "" {
			req.Header.Set("Origin", origin)
			req.Header.Set("Access-Control-Request-Method", "POST")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := do(m, http.MethodPost, ""); r.StatusCode != http.StatusUnauthorized || !strings.Contains(r.Header.Get("WWW-Authenticate"), "resource_metadata") {
		t.Fatalf("POST without a token: %s %v", r.Status, r.Header)
	}
	if r := do(m, http.MethodOptions, "https://ui2.example"); r.StatusCode != http.StatusNoContent {
		t.Fatalf("preflight from the second UI origin: %s", r.Status)
	}
	if r := do(m, http.MethodOptions, "https://elsewhere.example"); r.StatusCode != http.StatusForbidden {
		t.Fatalf("preflight from elsewhere: %s", r.Status)
	}
	clear, err := start("", false)
	if err != nil {
		t.Fatal(err)
	}
	if r := do(clear, http.MethodPost, ""); r.StatusCode != http.StatusNotFound {
		t.Fatalf("a serve without payload keys answered the codec: %s", r.Status)
	}
}
