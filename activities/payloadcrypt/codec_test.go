package payloadcrypt

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
)

// openStore is a store over a fresh file:// bucket and a fresh local key-encryption key (the
// dev stack's real parts). kek "" makes one.
func openStore(t *testing.T, dir, kek string, o Options) *Opened {
	t.Helper()
	if kek == "" {
		kek = NewLocalKEK()
	}
	s, err := Open(context.Background(), kek, "file://"+dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

type secretArgs struct {
	Purpose string            `json:"purpose"`
	Params  map[string]string `json:"params"`
}

var words = secretArgs{Purpose: "renewal mailing for the otters", Params: map[string]string{"mood": "zanzibar-velvet"}}

func forWorkflow(dc converter.DataConverter, id string) converter.DataConverter {
	return converter.WithDataConverterSerializationContext(dc, converter.WorkflowSerializationContext{Namespace: "default", WorkflowID: id})
}

func TestRoundTrip(t *testing.T) {
	s := openStore(t, t.TempDir(), "", Options{})
	dc := NewDataConverter(s.Store)
	p, err := forWorkflow(dc, "acme/export/ana/k1").ToPayload(words)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(p.Metadata[converter.MetadataEncoding]); got != EncodingEncrypted {
		t.Fatalf("encoding %q", got)
	}
	if string(p.Metadata[MetadataTenant]) != "acme" || !ValidKeyID(string(p.Metadata[MetadataKeyID])) {
		t.Fatalf("metadata %v", p.Metadata)
	}
	for _, w := range []string{"otters", "zanzibar", "purpose", "mood"} {
		if bytes.Contains(p.Data, []byte(w)) {
			t.Fatalf("ciphertext holds %q", w)
		}
	}
	// Decoding needs no context: the envelope names tenant and key.
	var back secretArgs
	if err := dc.FromPayload(p, &back); err != nil || back.Purpose != words.Purpose || back.Params["mood"] != "zanzibar-velvet" {
		t.Fatalf("decoded %+v, %v", back, err)
	}
	// Activities get the workflow's tenant too.
	ap, err := converter.WithDataConverterSerializationContext(dc, converter.ActivitySerializationContext{WorkflowID: "globex/eval/gus/x/notify/r1"}).ToPayload("x")
	if err != nil || string(ap.Metadata[MetadataTenant]) != "globex" {
		t.Fatalf("activity payload %v, %v", ap.GetMetadata(), err)
	}
}

func TestEncodeWithoutTenantRefused(t *testing.T) {
	s := openStore(t, t.TempDir(), "", Options{})
	dc := NewDataConverter(s.Store)
	for _, id := range []string{"", "no-slash", "Bad Tenant/eval/a/b"} {
		if _, err := forWorkflow(dc, id).ToPayload(words); !errors.Is(err, ErrNoTenant) {
			t.Errorf("workflow ID %q: %v, want ErrNoTenant", id, err)
		}
	}
	if _, err := dc.ToPayload(words); !errors.Is(err, ErrNoTenant) {
		t.Errorf("no context: %v, want ErrNoTenant", err)
	}
	// Nothing to seal is no error: the SDK encodes a cancelled workflow's empty details
	// without a context.
	if ps, err := dc.ToPayloads(); err != nil || len(ps.GetPayloads()) != 0 {
		t.Errorf("empty: %v, %v", ps, err)
	}
}

func TestLegacyAndMixedPayloadsDecode(t *testing.T) {
	s := openStore(t, t.TempDir(), "", Options{})
	dc := NewDataConverter(s.Store)
	clear, err := converter.GetDefaultDataConverter().ToPayloads(words, 7)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := forWorkflow(dc, "acme/eval/ana/k").ToPayload("sealed")
	if err != nil {
		t.Fatal(err)
	}
	mixed := &commonpb.Payloads{Payloads: append(clear.Payloads, sealed)}
	var a secretArgs
	var n int
	var str string
	if err := dc.FromPayloads(mixed, &a, &n, &str); err != nil || a.Purpose != words.Purpose || n != 7 || str != "sealed" {
		t.Fatalf("mixed: %+v %d %q %v", a, n, str, err)
	}
	// A sealed payload handed back (a memo read and written again) is not sealed twice.
	again, err := NewCodec(s.Store).ForTenant("acme").Encode([]*commonpb.Payload{sealed})
	if err != nil || again[0] != sealed {
		t.Fatalf("re-encode: %v", err)
	}
}

func TestTamperedAndRelabelledRefused(t *testing.T) {
	s := openStore(t, t.TempDir(), "", Options{})
	dc := NewDataConverter(s.Store)
	p, err := forWorkflow(dc, "acme/export/ana/k1").ToPayload(words)
	if err != nil {
		t.Fatal(err)
	}
	gk, _, err := s.Current("globex") // globex has a key of its own
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(q *commonpb.Payload){
		"flipped bit": func(q *commonpb.Payload) { q.Data[len(q.Data)-1] ^= 1 },
		"nonce":       func(q *commonpb.Payload) { q.Data[0] ^= 1 },
		"truncated":   func(q *commonpb.Payload) { q.Data = q.Data[:20] },
		"other tenant": func(q *commonpb.Payload) {
			q.Metadata[MetadataTenant] = []byte("globex")
			q.Metadata[MetadataKeyID] = []byte(gk)
		},
		"bad key ID": func(q *commonpb.Payload) { q.Metadata[MetadataKeyID] = []byte("../../etc/passwd") },
		"bad tenant": func(q *commonpb.Payload) { q.Metadata[MetadataTenant] = []byte("../x") },
	}
	for name, mut := range cases {
		q := &commonpb.Payload{Metadata: map[string][]byte{}, Data: bytes.Clone(p.Data)}
		for k, v := range p.Metadata {
			q.Metadata[k] = bytes.Clone(v)
		}
		mut(q)
		var back secretArgs
		err := dc.FromPayload(q, &back)
		if !errors.Is(err, ErrOpen) && !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
}

func TestWrongKEKAndUnknownKeyRefused(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, "", Options{})
	p, err := forWorkflow(NewDataConverter(s.Store), "acme/eval/ana/k").ToPayload(words)
	if err != nil {
		t.Fatal(err)
	}
	// Another key-encryption key over the same store cannot unwrap the data key.
	other := openStore(t, dir, NewLocalKEK(), Options{})
	var back secretArgs
	if err := NewDataConverter(other.Store).FromPayload(p, &back); err == nil || !strings.Contains(err.Error(), "unwrap") {
		t.Fatalf("wrong KEK: %v", err)
	}
	// Another store (another deployment, or a forgotten tenant) does not know the key ID.
	elsewhere := openStore(t, t.TempDir(), "", Options{})
	if err := NewDataConverter(elsewhere.Store).FromPayload(p, &back); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("unknown key: %v", err)
	}
}

// TestEmptyLocalKEKRefused: "base64key://" with no key would be a random key per process
// (localsecrets' behaviour), so processes could not open each other's data keys: refused.
func TestEmptyLocalKEKRefused(t *testing.T) {
	for _, kek := range []string{"base64key://", "base64key:///", "base64key://?"} {
		if _, err := Open(context.Background(), kek, "file://"+t.TempDir(), Options{}); err == nil || !strings.Contains(err.Error(), "holds no key") {
			t.Errorf("Open(%q): %v, want a refusal", kek, err)
		}
	}
}

func TestRotation(t *testing.T) {
	dir, kek := t.TempDir(), NewLocalKEK()
	now := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	s := openStore(t, dir, kek, Options{Now: clock, CurrentTTL: time.Minute})
	dc := NewDataConverter(s.Store)
	old, err := forWorkflow(dc, "acme/eval/ana/k").ToPayload("before")
	if err != nil {
		t.Fatal(err)
	}
	// An operator rotates from another process (jobgate payload-keys rotate).
	now = now.Add(time.Second)
	op := openStore(t, dir, kek, Options{Now: clock})
	newID, err := op.Add(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	// Until its CurrentTTL passes this process keeps the key it had; then it uses the new one.
	p, _ := forWorkflow(dc, "acme/eval/ana/k").ToPayload("during")
	if string(p.Metadata[MetadataKeyID]) != string(old.Metadata[MetadataKeyID]) {
		t.Fatalf("switched before its TTL")
	}
	now = now.Add(2 * time.Minute)
	p, _ = forWorkflow(dc, "acme/eval/ana/k").ToPayload("after")
	if string(p.Metadata[MetadataKeyID]) != newID {
		t.Fatalf("after rotation sealed with %s, want %s", p.Metadata[MetadataKeyID], newID)
	}
	var s1, s2 string
	if dc.FromPayload(old, &s1) != nil || dc.FromPayload(p, &s2) != nil || s1 != "before" || s2 != "after" {
		t.Fatalf("old %q new %q", s1, s2)
	}
	ids, err := s.List(context.Background(), "acme")
	if err != nil || len(ids) != 2 || ids[1] != newID {
		t.Fatalf("keys %v, %v", ids, err)
	}
}

func TestCacheBounded(t *testing.T) {
	s := openStore(t, t.TempDir(), "", Options{CacheSize: 2})
	for _, ten := range []string{"a1", "a2", "a3", "a4"} {
		if _, _, err := s.Current(ten); err != nil {
			t.Fatal(err)
		}
	}
	if s.keys.len() > 2 || s.current.len() > 2 {
		t.Fatalf("cache holds %d keys, %d current", s.keys.len(), s.current.len())
	}
	// An evicted key comes back from the store.
	ids, _ := s.List(context.Background(), "a1")
	if _, err := s.Key("a1", ids[0]); err != nil {
		t.Fatal(err)
	}
}

func TestFailureConverterSealsMessages(t *testing.T) {
	s := openStore(t, t.TempDir(), "", Options{})
	dc := NewDataConverter(s.Store)
	fc := converter.WithFailureConverterSerializationContext(NewFailureConverter(dc),
		converter.ActivitySerializationContext{WorkflowID: "acme/export/ana/k1"})
	f := fc.ErrorToFailure(temporal.NewApplicationError("column ssn_secret_col is gone", "Schema", "detail-words"))
	if strings.Contains(f.String(), "ssn_secret_col") || strings.Contains(f.String(), "detail-words") {
		t.Fatalf("failure in clear: %v", f)
	}
	err := NewFailureConverter(dc).FailureToError(f)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Message() != "column ssn_secret_col is gone" || ae.Type() != "Schema" {
		t.Fatalf("decoded %v", err)
	}
	var d string
	if ae.Details(&d) != nil || d != "detail-words" {
		t.Fatalf("details %q", d)
	}
	// Raw history readers open them in place.
	DecodeFailure(dc, f)
	if f.Message != "column ssn_secret_col is gone" {
		t.Fatalf("DecodeFailure: %q", f.Message)
	}
	// Without a tenant the message is withheld, not written in clear and not a panic.
	nf := NewFailureConverter(dc).ErrorToFailure(errors.New("ssn_secret_col"))
	if nf.Message != withheld {
		t.Fatalf("no tenant: %q", nf.Message)
	}
}

func TestKeyIDs(t *testing.T) {
	id := newKeyID(time.Now())
	if !ValidKeyID(id) {
		t.Fatalf("%q invalid", id)
	}
	for _, bad := range []string{"", "x", strings.Repeat("0", keyIDLen), "20261205T032000.123456789Z-ABCDEF01", "20261205T032000.123456789Z_abcdef01", "20261205T032000.123456789Z-abcdef0/", "20261205T032000Z-abcdef01"} {
		if ValidKeyID(bad) {
			t.Errorf("%q valid", bad)
		}
	}
	if TenantOf("acme/eval/ana/k") != "acme" || TenantOf("acme") != "" || TenantOf("/x") != "" {
		t.Error("TenantOf")
	}
}
