package handle

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

const (
	testSigning = "s2:" + "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a," +
		"s1:" + "a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5"
	testManifest = `{"object":"exports/j/export.csv.gz","bytes":33,"sha256":"00ff","parts":[{"part":1,"bytes":3,"sha256":"aa"}],` +
		`"decision":{"by":"steward","signature":"jgds1.s2.x.y"},"approval_required":true,"manifest_version":2}`
)

func mustSigning(t testing.TB, spec string) *SigningKeyring {
	t.Helper()
	k, err := ParseSigningKeyring(spec)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// withField is the JSON object s with field set to v.
func withField(s, field, v string) []byte {
	var m map[string]any
	_ = json.Unmarshal([]byte(s), &m)
	m[field] = v
	b, _ := json.Marshal(m)
	return b
}

// TestRFC8037Key: a seed of RFC 8037 appendix A.1 gives its public key x and the RFC 7638
// thumbprint of appendix A.3, so the published set is what any JOSE library reads.
func TestRFC8037Key(t *testing.T) {
	k := mustSigning(t, "a1:base64:nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A")
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(k.PublicJWKS(), &set); err != nil || len(set.Keys) != 1 {
		t.Fatalf("JWKS %s: %v", k.PublicJWKS(), err)
	}
	want := map[string]string{"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo", "kid": "a1", "use": "sig", "alg": "EdDSA"}
	if fmt.Sprint(set.Keys[0]) != fmt.Sprint(want) {
		t.Errorf("JWK %v, want %v", set.Keys[0], want)
	}
	if got := k.Public().Thumbprint("a1"); got != "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k" {
		t.Errorf("thumbprint %s", got)
	}
	if strings.Contains(string(k.PublicJWKS()), `"d"`) || strings.Contains(fmt.Sprintf("%v %+v %#v", k, k, *k), "nWGx") {
		t.Error("private key material shown")
	}
}

// TestManifestSignature: a manifest signature verifies with the public keys alone, whatever the
// manifest's key order and spacing; any changed, added or removed field fails; rotation keeps
// older signatures verifying; another deployment's key ID is ErrUnknownSigningKey.
func TestManifestSignature(t *testing.T) {
	k := mustSigning(t, testSigning)
	sig, err := k.SignManifest([]byte(testManifest))
	if err != nil || !strings.HasPrefix(sig, "jgms1.s2.") || len(sig) != len("jgms1.s2.")+edSigB64Len {
		t.Fatalf("sign %q, %v", sig, err)
	}
	signed := withField(testManifest, ManifestSignatureField, sig)
	pub, err := ParseJWKS(k.PublicJWKS()) // as an auditor has them
	if err != nil {
		t.Fatal(err)
	}
	if kid, found, err := pub.VerifyManifest(signed); err != nil || !found || kid != "s2" {
		t.Fatalf("verify: %q %v %v", kid, found, err)
	}
	var v any
	_ = json.Unmarshal(signed, &v)
	indented, _ := json.MarshalIndent(v, "", "   ")
	if _, _, err := pub.VerifyManifest(indented); err != nil {
		t.Errorf("reformatted: %v", err)
	}
	for name, edit := range map[string]func(m map[string]any){
		"artifact digest":   func(m map[string]any) { m["sha256"] = "01ff" },
		"part digest":       func(m map[string]any) { m["parts"].([]any)[0].(map[string]any)["sha256"] = "ab" },
		"decision record":   func(m map[string]any) { m["decision"].(map[string]any)["by"] = "mallory" },
		"decision removed":  func(m map[string]any) { delete(m, "decision") },
		"approval required": func(m map[string]any) { delete(m, "approval_required") },
		"version":           func(m map[string]any) { m["manifest_version"] = 1 },
		"field added":       func(m map[string]any) { m["SHA256"] = "01ff" },
		"legacy seal added": func(m map[string]any) { m[ManifestSealField] = "jgm1.r1.x" },
	} {
		var m map[string]any
		_ = json.Unmarshal(signed, &m)
		edit(m)
		b, _ := json.Marshal(m)
		if _, _, err := pub.VerifyManifest(b); !errors.Is(err, ErrSignature) {
			t.Errorf("%s: %v, want ErrSignature", name, err)
		}
	}
	// Rotation: s3 now signs; what s2 signed still verifies while s2 stays published.
	rotated := mustSigning(t, "s3:"+strings.Repeat("33", 32)+","+testSigning)
	if kid, _, err := rotated.Public().VerifyManifest(signed); err != nil || kid != "s2" {
		t.Errorf("after rotation: %q %v", kid, err)
	}
	if s3, _ := rotated.SignManifest([]byte(testManifest)); !strings.HasPrefix(s3, "jgms1.s3.") {
		t.Errorf("rotated ring signs with %q", s3)
	}
	other := mustSigning(t, "s9:"+strings.Repeat("99", 32))
	if kid, _, err := other.Public().VerifyManifest(signed); !errors.Is(err, ErrUnknownSigningKey) || kid != "s2" {
		t.Errorf("other deployment: %q %v", kid, err)
	}
	sameKID := mustSigning(t, "s2:"+strings.Repeat("99", 32))
	if _, _, err := sameKID.Public().VerifyManifest(signed); !errors.Is(err, ErrSignature) {
		t.Errorf("same kid, other key: %v", err)
	}
	if _, found, err := pub.VerifyManifest([]byte(testManifest)); found || err != nil {
		t.Errorf("unsigned: found %v, %v", found, err)
	}
}

// TestDecisionSignature: a decision signature opens with the public keys to exactly the fields
// signed (no expiry check: records are audited long after); a changed payload, a resume seal or
// a manifest signature's bytes do not open as one.
func TestDecisionSignature(t *testing.T) {
	k := mustSigning(t, testSigning)
	r := Resume{WorkflowID: "acme/export/ana/q3", RunID: "run-1", InputID: "approve-1", ScopeDigest: "sha256:" + strings.Repeat("0", 64),
		Tenant: "acme", Subject: "steward", Scopes: []string{"jobs:approve"}, Decision: "approve",
		CommentDigest: strings.Repeat("a", 64), Surface: "page", SignedInWith: "oidc-session", Email: "s@acme.example",
		AuthTime: time.Unix(1700000000, 0).UTC(), AMR: []string{"pwd"}, MeaningDigest: strings.Repeat("b", 64),
		Expiry: time.Unix(1700000300, 0).UTC()}
	s := k.SignDecision(r)
	if !strings.HasPrefix(s, DecisionRecordPrefix+".s2.") {
		t.Fatalf("signature %q", s)
	}
	got, kid, err := k.Public().OpenDecision(s)
	if err != nil || kid != "s2" || fmt.Sprint(got) != fmt.Sprint(r) {
		t.Fatalf("open: %+v %q %v", got, kid, err)
	}
	parts := strings.Split(s, ".")
	payload, _ := b64.DecodeString(parts[2])
	forged := strings.Join([]string{parts[0], parts[1], b64.EncodeToString([]byte(strings.Replace(string(payload), "steward", "mallory", 1))), parts[3]}, ".")
	resumeKeys, _ := ParseKeyring("s2:" + strings.Repeat("5a", 32))
	seal := resumeKeys.SealResume(r)
	ms, _ := k.SignManifest([]byte(testManifest))
	for name, bad := range map[string]string{
		"payload changed": forged,
		"resume seal":     seal,
		"as another kind": strings.Replace(seal, ResumePrefix, DecisionRecordPrefix, 1),
		"manifest sig":    ms,
		"empty":           "",
		"too long":        s + strings.Repeat("A", MaxDecisionSigLen),
	} {
		if _, _, err := k.Public().OpenDecision(bad); !errors.Is(err, ErrSignature) {
			t.Errorf("%s: %v, want ErrSignature", name, err)
		}
	}
	if _, _, err := mustSigning(t, "s9:"+strings.Repeat("99", 32)).Public().OpenDecision(s); !errors.Is(err, ErrUnknownSigningKey) {
		t.Errorf("other deployment: %v", err)
	}
	if k.SignDecision(Resume{}) != "" {
		t.Error("an invalid Resume was signed")
	}
}

// TestParseSigningKeys: specs and JWK sets that must be refused, with errors that show no
// key material.
func TestParseSigningKeys(t *testing.T) {
	for _, spec := range []string{"", "s1", "s1:" + strings.Repeat("ab", 31), "s1:" + strings.Repeat("ab", 32) + ",s1:" + strings.Repeat("cd", 32),
		"bad kid!:" + strings.Repeat("ab", 32), "s1:zz"} {
		if _, err := ParseSigningKeyring(spec); err == nil || strings.Contains(err.Error(), "abab") {
			t.Errorf("%q: %v", spec, err)
		}
	}
	x := "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
	for name, set := range map[string]string{
		"private d":    `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `","d":"nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"}]}`,
		"no kid":       `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + x + `"}]}`,
		"kid twice":    `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `"},{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `"}]}`,
		"short x":      `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"11qY"}]}`,
		"other alg":    `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `","alg":"ES256"}]}`,
		"none usable":  `{"keys":[{"kty":"RSA","kid":"r","n":"AQAB","e":"AQAB"}]}`,
		"trailing":     `{"keys":[]} {}`,
		"not a object": `[]`,
	} {
		if _, err := ParseJWKS([]byte(set)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	p, err := ParseJWKS([]byte(`{"keys":[{"kty":"RSA","kid":"r"},{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `"}]}`))
	if err != nil || fmt.Sprint(p.KIDs()) != "[a]" {
		t.Errorf("mixed set: %v %v", p.KIDs(), err)
	}
}

// FuzzVerifyManifest: any bytes give an error or a verdict, never a panic; a manifest that
// verifies is one the ring itself signs to the very same signature (Ed25519 is deterministic):
// no second form of a signed manifest verifies with another signature.
func FuzzVerifyManifest(f *testing.F) {
	k := mustSigning(f, testSigning)
	sig, _ := k.SignManifest([]byte(testManifest))
	f.Add(withField(testManifest, ManifestSignatureField, sig))
	f.Add([]byte(testManifest))
	f.Add([]byte(`{"manifest_signature":"jgms1.s2.AAAA","a":1,"a":2}`))
	f.Add([]byte(`{"manifest_signature":7}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		kid, found, err := k.Public().VerifyManifest(b)
		if err != nil || !found {
			return
		}
		again, err := k.SignManifest(b)
		var m map[string]json.RawMessage
		_ = json.Unmarshal(b, &m)
		var embedded string
		_ = json.Unmarshal(m[ManifestSignatureField], &embedded)
		if err != nil || kid != "s2" || again != embedded {
			t.Fatalf("verified under %q, re-signed %q (%v), embedded %q", kid, again, err, embedded)
		}
	})
}

// FuzzOpenDecision: any string gives an error or the signed fields, never a panic; a
// signature that opens is exactly the one the ring makes for those fields (no malleable form).
func FuzzOpenDecision(f *testing.F) {
	k := mustSigning(f, testSigning)
	r := Resume{WorkflowID: "w", RunID: "r", InputID: "i", ScopeDigest: "d", Tenant: "t", Subject: "s", Scopes: []string{},
		Decision: "approve", CommentDigest: strings.Repeat("a", 64), Surface: "tool", SignedInWith: "bearer-jwt",
		Expiry: time.Unix(1700000300, 0).UTC()}
	f.Add(k.SignDecision(r))
	f.Add("jgds1.s2..")
	f.Add("jgds1.s9.e30." + strings.Repeat("A", edSigB64Len))
	f.Fuzz(func(t *testing.T, s string) {
		got, _, err := k.Public().OpenDecision(s)
		if err != nil {
			return
		}
		if again := k.SignDecision(got); again != s {
			t.Fatalf("opened %q, but the ring signs those fields as %q", s, again)
		}
	})
}

// FuzzParseJWKS: any bytes give an error or keys that survive publishing again.
func FuzzParseJWKS(f *testing.F) {
	f.Add(mustSigning(f, testSigning).PublicJWKS())
	f.Add([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"11qY","d":"x"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseJWKS(b)
		if err != nil {
			return
		}
		q, err := ParseJWKS(p.JWKS())
		if err != nil || fmt.Sprint(q.KIDs()) != fmt.Sprint(p.KIDs()) {
			t.Fatalf("republished: %v %v vs %v", err, q.KIDs(), p.KIDs())
		}
		for _, kid := range p.KIDs() {
			if p.Thumbprint(kid) != q.Thumbprint(kid) {
				t.Fatalf("thumbprint of %s changed", kid)
			}
		}
	})
}
