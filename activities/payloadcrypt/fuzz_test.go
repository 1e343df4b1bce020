package payloadcrypt

import (
	"errors"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

// FuzzParseEnvelope: whatever metadata and data a history holds, parsing never panics, a
// payload it accepts has a valid tenant and key ID and enough data for nonce and tag, and
// decoding refuses (never panics on) anything that does not authenticate.
func FuzzParseEnvelope(f *testing.F) {
	f.Add(EncodingEncrypted, "acme", "20261205T032000.123456789Z-0a1b2c3d", make([]byte, 40))
	f.Add(EncodingEncrypted, "../x", "20261205T032000.123456789Z-0a1b2c3d", make([]byte, 40))
	f.Add(EncodingEncrypted, "acme", "../../keys", make([]byte, 40))
	f.Add(EncodingEncrypted, "acme", "20261205T032000.123456789Z-0a1b2c3d", make([]byte, 27))
	f.Add("json/plain", "", "", []byte(`{"purpose":"x"}`))
	f.Add("binary/null", "", "", []byte{})
	f.Fuzz(func(t *testing.T, enc, tenant, keyID string, data []byte) {
		p := &commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte(enc),
			MetadataTenant: []byte(tenant), MetadataKeyID: []byte(keyID)}, Data: data}
		env, ok, err := parseEnvelope(p)
		if enc != EncodingEncrypted {
			if ok || err != nil {
				t.Fatalf("clear payload: ok %v err %v", ok, err)
			}
			return
		}
		if !ok {
			t.Fatal("encrypted payload not recognised")
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if env.tenant != tenant || env.keyID != keyID || !ValidKeyID(keyID) || len(env.nonce) != nonceSize || len(env.sealed) < tagSize {
			t.Fatalf("accepted %+v", env)
		}
		a, err := newAEAD(make([]byte, 32))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := open(a, env); err == nil {
			t.Fatal("random data authenticated")
		}
	})
}
