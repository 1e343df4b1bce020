package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/tests/support/testenv"
)

// TestDevCodecServer: dev's Web UI is configured with the frontend's codec endpoint, the
// frontend answers the UI origin's preflight, and a tokenless request from this machine (the
// UI has no sign-in) reads an acme payload in clear, while a globex admin's token gets it
// sealed, as stored.
func TestDevCodecServer(t *testing.T) {
	testenv.Heavy(t, "starts a dev stack with its Web UI")
	var out bytes.Buffer
	m := &DevMain{Config: DevConfig{Ephemeral: true, Listen: "127.0.0.1:0", TemporalPort: 0, UIPort: 0, TokenTTL: time.Hour}, Out: &out}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		_ = m.Close()
		t.Fatal(err)
	}
	defer m.Close()
	base, ui := devBase(m), m.temporal.UIURL()

	settings := getJSONMap(t, ui+"/api/v1/settings")
	if codec, _ := settings["Codec"].(map[string]any); codec["Endpoint"] != base+"/codec" {
		t.Fatalf("UI codec settings %v, want endpoint %s/codec", settings["Codec"], base)
	}

	req, _ := http.NewRequest(http.MethodOptions, base+"/codec/decode", nil)
	req.Header.Set("Origin", ui)
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != ui {
		t.Fatalf("preflight from the dev UI: %s %v", resp.Status, resp.Header)
	}

	dc := converter.WithDataConverterSerializationContext(m.DataConverter(),
		converter.WorkflowSerializationContext{Namespace: "default", WorkflowID: "acme/eval/ana/dev-codec"})
	p, err := dc.ToPayload("acme's words")
	if err != nil {
		t.Fatal(err)
	}
	pj, _ := protojson.Marshal(p)
	body := []byte(`{"payloads":[` + string(pj) + `]}`)
	decode := func(token string) *commonpb.Payload {
		req, _ := http.NewRequest(http.MethodPost, base+"/codec/decode", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", ui)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var ps commonpb.Payloads
		if resp.StatusCode != http.StatusOK || protojson.Unmarshal(b, &ps) != nil || len(ps.Payloads) != 1 {
			t.Fatalf("decode: %s %s", resp.Status, b)
		}
		return ps.Payloads[0]
	}
	var s string
	if err := json.Unmarshal(decode("").GetData(), &s); err != nil || s != "acme's words" {
		t.Fatalf("dev operator read %q (%v)", s, err)
	}
	tok, err := m.MintDevToken("globex", "gops", []authz.Scope{authz.ScopeAdmin}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := decode(tok); !bytes.Equal(got.GetData(), p.GetData()) || strings.Contains(string(got.GetData()), "words") {
		t.Fatal("a globex admin's token opened acme's payload")
	}
}
