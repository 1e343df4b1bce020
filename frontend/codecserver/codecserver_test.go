package codecserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/codecserver"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	issuer   = "codec-test"
	resource = "http://localhost:8080/mcp"
	uiOrigin = "http://localhost:8233"
)

var secret = []byte("0123456789abcdef0123456789abcdef-codec")

// fixture is a codec server on a real listener, with serve's verifier kind and a real key store.
type fixture struct {
	url   string
	codec *payloadcrypt.Codec
}

func newFixture(t *testing.T, dev bool) fixture {
	t.Helper()
	keys, err := payloadcrypt.Open(context.Background(), payloadcrypt.NewLocalKEK(), "mem://", payloadcrypt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = keys.Close() })
	v, err := authz.NewHS256Verifier(issuer, resource, secret, "")
	if err != nil {
		t.Fatal(err)
	}
	codec := payloadcrypt.NewCodec(keys.Store)
	h, err := codecserver.New(codecserver.Options{Verifier: v, Codec: codec, AllowOrigins: []string{uiOrigin},
		ResourceURI: resource, DevOperator: dev})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(codecserver.PathPrefix, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return fixture{url: srv.URL, codec: codec}
}

func token(t *testing.T, tenant, sub string, scopes ...authz.Scope) string {
	t.Helper()
	tok, err := authz.MintHS256(secret, authz.MintOptions{Issuer: issuer, Audience: resource, Tenant: tenant, Subject: sub, Scopes: scopes})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// sealed is words sealed for tenant, as a worker would write them to Temporal.
func (f fixture) sealed(t *testing.T, tenant, words string) *commonpb.Payload {
	t.Helper()
	p, err := converter.GetDefaultDataConverter().ToPayload(words)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := f.codec.ForTenant(tenant).Encode([]*commonpb.Payload{p})
	if err != nil {
		t.Fatal(err)
	}
	return ps[0]
}

func body(t *testing.T, ps ...*commonpb.Payload) []byte {
	t.Helper()
	raw := make([]json.RawMessage, len(ps))
	for i, p := range ps {
		b, err := protojson.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		raw[i] = b
	}
	b, _ := json.Marshal(map[string]any{"payloads": raw})
	return b
}

func post(t *testing.T, url, tok, origin string, b []byte) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Namespace", "default")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

func payloads(t *testing.T, b []byte) []*commonpb.Payload {
	t.Helper()
	var ps commonpb.Payloads
	if err := protojson.Unmarshal(b, &ps); err != nil {
		t.Fatalf("answer %s: %v", b, err)
	}
	return ps.Payloads
}

func words(t *testing.T, p *commonpb.Payload) string {
	t.Helper()
	var s string
	if err := converter.GetDefaultDataConverter().FromPayload(p, &s); err != nil {
		t.Fatalf("payload %s does not read as JSON: %v", payloadcrypt.Describe(p), err)
	}
	return s
}

// TestDecodeOnlyAdministeredTenants: an admin of the payload's tenant reads it; an admin of
// another tenant and a non-admin of the same tenant get the very bytes they sent.
func TestDecodeOnlyAdministeredTenants(t *testing.T) {
	f := newFixture(t, false)
	acme, globex := f.sealed(t, "acme", "renewal mailing for Q3"), f.sealed(t, "globex", "globex secret plan")
	clear, _ := converter.GetDefaultDataConverter().ToPayload("clear words")
	in := body(t, acme, globex, clear)

	resp, b := post(t, f.url+codecserver.PathDecode, token(t, "acme", "ops", authz.ScopeAdmin), uiOrigin, in)
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != uiOrigin {
		t.Fatalf("acme admin: %d %q %s", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), b)
	}
	got := payloads(t, b)
	if len(got) != 3 || words(t, got[0]) != "renewal mailing for Q3" || words(t, got[2]) != "clear words" {
		t.Fatalf("acme admin got %s", b)
	}
	if !bytes.Equal(got[1].Data, globex.Data) || strings.Contains(string(b), "globex secret") {
		t.Fatalf("acme admin read globex's payload: %s", b)
	}

	for name, tok := range map[string]string{
		"globex admin":       token(t, "globex", "gops", authz.ScopeAdmin),
		"acme reader/writer": token(t, "acme", "ana", authz.ScopeRead, authz.ScopeWrite, authz.ScopeApprove),
	} {
		resp, b := post(t, f.url+codecserver.PathDecode, tok, "", body(t, acme))
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", name, resp.StatusCode, b)
		}
		got := payloads(t, b)
		if len(got) != 1 || !bytes.Equal(got[0].Data, acme.Data) ||
			string(got[0].Metadata[converter.MetadataEncoding]) != payloadcrypt.EncodingEncrypted || strings.Contains(string(b), "renewal") {
			t.Fatalf("%s got %s, want acme's ciphertext untouched", name, b)
		}
	}
}

// TestTokens: no token and a bad one are 401 with the RFC 9728 challenge; a token of another
// audience is a bad one. Without DevOperator, loopback is no identity.
func TestTokens(t *testing.T) {
	f := newFixture(t, false)
	other, _ := authz.MintHS256(secret, authz.MintOptions{Issuer: issuer, Audience: "http://elsewhere/mcp", Tenant: "acme", Subject: "ops",
		Scopes: []authz.Scope{authz.ScopeAdmin}})
	for name, tok := range map[string]string{"none": "", "garbage": "not-a-jwt", "other audience": other} {
		resp, b := post(t, f.url+codecserver.PathDecode, tok, uiOrigin, body(t))
		ch := resp.Header.Get("WWW-Authenticate")
		if resp.StatusCode != 401 || !strings.Contains(ch, `resource_metadata="http://localhost:8080/.well-known/oauth-protected-resource/mcp"`) ||
			(tok != "") != strings.Contains(ch, "invalid_token") {
			t.Errorf("%s: %d %q %s", name, resp.StatusCode, ch, b)
		}
	}
}

// TestCORS: the UI's origin gets its preflight answered; any other origin is refused, its
// preflight and its POST alike, with no CORS header.
func TestCORS(t *testing.T) {
	f := newFixture(t, false)
	pre := func(origin string) *http.Response {
		req, _ := http.NewRequest(http.MethodOptions, f.url+codecserver.PathDecode, nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization,content-type,x-namespace")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := pre(uiOrigin)
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != uiOrigin ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Authorization") ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "X-Namespace") {
		t.Fatalf("preflight from the UI: %d %v", resp.StatusCode, resp.Header)
	}
	resp = pre("http://evil.example")
	if resp.StatusCode != 403 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight from elsewhere: %d %v", resp.StatusCode, resp.Header)
	}
	acme := f.sealed(t, "acme", "renewal mailing for Q3")
	resp, b := post(t, f.url+codecserver.PathDecode, token(t, "acme", "ops", authz.ScopeAdmin), "http://evil.example", body(t, acme))
	if resp.StatusCode != 403 || resp.Header.Get("Access-Control-Allow-Origin") != "" || strings.Contains(string(b), "renewal") {
		t.Fatalf("POST from elsewhere: %d %v %s", resp.StatusCode, resp.Header, b)
	}
}

// TestBadBody: 400 naming the field at fault.
func TestBadBody(t *testing.T) {
	f := newFixture(t, false)
	tok := token(t, "acme", "ops", authz.ScopeAdmin)
	for in, want := range map[string]string{
		`{}`:                                  "payloads: required",
		`{"payloads":{}}`:                     "payloads: want",
		`{"payloads":[{"data":"!!"}]}`:        "payloads[0]:",
		`{"payloads":[],"extra":1}`:           `extra: unknown field`,
		`{"payloads":[]} {}`:                  "trailing data",
		`not json`:                            "body:",
		`{"payloads":[{"metadata":{"a":1}}]}`: "payloads[0]:",
	} {
		resp, b := post(t, f.url+codecserver.PathDecode, tok, "", []byte(in))
		if resp.StatusCode != 400 || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d %s, want 400 naming %q", in, resp.StatusCode, b, want)
		}
	}
	resp, b := post(t, f.url+codecserver.PathDecode, tok, "", []byte(`{"payloads":[]}`))
	if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `{"payloads":[]}` {
		t.Errorf("empty list: %d %s", resp.StatusCode, b)
	}
}

// TestEncode: an admin's payloads are sealed for their own tenant (and decode back); anyone
// else is refused rather than handed clear payloads for Temporal.
func TestEncode(t *testing.T) {
	f := newFixture(t, true)
	clear, _ := converter.GetDefaultDataConverter().ToPayload("a signal's words")
	resp, b := post(t, f.url+codecserver.PathEncode, token(t, "acme", "ops", authz.ScopeAdmin), "", body(t, clear))
	if resp.StatusCode != 200 {
		t.Fatalf("admin encode: %d %s", resp.StatusCode, b)
	}
	got := payloads(t, b)
	if tenant, ok := payloadcrypt.SealedTenant(got[0]); !ok || tenant != "acme" || strings.Contains(string(b), "signal") {
		t.Fatalf("admin encode gave %s", b)
	}
	if words(t, must(f.codec.Decode(got))[0]) != "a signal's words" {
		t.Fatal("sealed payload does not open")
	}
	for name, tok := range map[string]string{"writer": token(t, "acme", "ana", authz.ScopeWrite), "dev operator": ""} {
		resp, b := post(t, f.url+codecserver.PathEncode, tok, "", body(t, clear))
		if resp.StatusCode != 403 || strings.Contains(string(b), "signal") {
			t.Errorf("%s encode: %d %s", name, resp.StatusCode, b)
		}
	}
}

// TestDevOperator: in dev, a tokenless request from this machine to a loopback Host decodes
// every tenant; a rebound Host name gets 401.
func TestDevOperator(t *testing.T) {
	f := newFixture(t, true)
	in := body(t, f.sealed(t, "acme", "acme words"), f.sealed(t, "globex", "globex words"))
	resp, b := post(t, f.url+codecserver.PathDecode, "", uiOrigin, in)
	if resp.StatusCode != 200 {
		t.Fatalf("dev operator: %d %s", resp.StatusCode, b)
	}
	if got := payloads(t, b); words(t, got[0]) != "acme words" || words(t, got[1]) != "globex words" {
		t.Fatalf("dev operator got %s", b)
	}
	req, _ := http.NewRequest(http.MethodPost, f.url+codecserver.PathDecode, bytes.NewReader(in))
	req.Host = "rebound.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("rebound Host: %d", resp.StatusCode)
	}
	// A credential that fails is a failed credential, not the tokenless operator.
	for _, a := range []string{"Basic YWRtaW46YWRtaW4=", "Bearer ", "Bearer not-a-jwt"} {
		req, _ := http.NewRequest(http.MethodPost, f.url+codecserver.PathDecode, bytes.NewReader(in))
		req.Header.Set("Authorization", a)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "invalid_token") {
			t.Fatalf("Authorization %q from loopback in dev: %d", a, resp.StatusCode)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestCounts: each payload is counted by outcome in jobgate_codec_payloads_total, and the debug
// log line of a decode says how many were opened and refused (and who asked), never contents.
func TestCounts(t *testing.T) {
	keys, err := payloadcrypt.Open(context.Background(), payloadcrypt.NewLocalKEK(), "mem://", payloadcrypt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = keys.Close() })
	v, err := authz.NewHS256Verifier(issuer, resource, secret, "")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	core, logs := observer.New(zap.DebugLevel)
	f := fixture{codec: payloadcrypt.NewCodec(keys.Store)}
	h, err := codecserver.New(codecserver.Options{Verifier: v, Codec: f.codec, ResourceURI: resource, Metrics: reg, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	acme, globex := f.sealed(t, "acme", "renewal mailing for Q3"), f.sealed(t, "globex", "globex secret plan")
	clear, _ := converter.GetDefaultDataConverter().ToPayload("clear words")
	gops := token(t, "globex", "gops", authz.ScopeAdmin)
	for _, tok := range []string{gops, token(t, "acme", "ops", authz.ScopeAdmin)} {
		if resp, b := post(t, srv.URL+codecserver.PathDecode, tok, "", body(t, acme, acme, globex, clear)); resp.StatusCode != 200 {
			t.Fatalf("decode: %d %s", resp.StatusCode, b)
		}
	}
	if resp, b := post(t, srv.URL+codecserver.PathEncode, token(t, "acme", "ana", authz.ScopeRead), "", body(t, clear, clear)); resp.StatusCode != 403 {
		t.Fatalf("encode by a non-admin: %d %s", resp.StatusCode, b)
	}
	if resp, b := post(t, srv.URL+codecserver.PathEncode, gops, "", body(t, clear)); resp.StatusCode != 200 {
		t.Fatalf("encode by an admin: %d %s", resp.StatusCode, b)
	}

	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "jobgate_codec_payloads_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			got[l["op"]+"/"+l["outcome"]] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		// gops: globex's opened, acme's two refused, one clear; ops: acme's two opened, globex's refused, one clear.
		"decode/opened": 3, "decode/refused": 3, "decode/clear": 2, "decode/failed": 0,
		"encode/sealed": 1, "encode/refused": 2, "encode/failed": 0,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("jobgate_codec_payloads_total = %v, want %v", got, want)
	}

	lines := logs.FilterMessage("codec server: decode").All()
	if len(lines) != 2 {
		t.Fatalf("%d decode log lines, want 2", len(lines))
	}
	first := lines[0].ContextMap()
	if first["sub"] != "gops" || first["tenant"] != "globex" || first["payloads"] != int64(4) || first["opened"] != int64(1) ||
		first["refused"] != int64(2) || first["clear"] != int64(1) || first["failed"] != int64(0) {
		t.Fatalf("gops's decode logged %v", first)
	}
	for _, e := range logs.All() {
		for _, f := range e.Context {
			if strings.Contains(f.String, "renewal") || strings.Contains(f.String, "secret plan") {
				t.Fatalf("a log line carries a payload's words: %v", e.ContextMap())
			}
		}
	}
}
