package handle

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func testKey(name string) []byte {
	sum := sha256.Sum256([]byte("jobgate handle test key " + name))
	return sum[:]
}

func TestNewKeyring(t *testing.T) {
	k0, k1 := testKey("k0"), testKey("k1")
	ring, err := NewKeyring("k1", map[string][]byte{"k0": k0, "k1": k1})
	if err != nil {
		t.Fatal(err)
	}
	if got := ring.CurrentKID(); got != "k1" {
		t.Errorf("CurrentKID = %q, want k1", got)
	}
	if got := fmt.Sprint(ring.KIDs()); got != "[k0 k1]" {
		t.Errorf("KIDs = %s, want [k0 k1]", got)
	}

	// Keys are copied: mutating the caller's slices changes nothing.
	h := Handle{Tenant: "acme", WorkflowID: "acme/eval/x", Kind: "eval", Expiry: testNow.Add(time.Hour)}
	s := ring.SealHandle(h)
	for i := range k1 {
		k1[i] ^= 0xff
	}
	if _, err := ring.OpenHandle(s, testNow); err != nil {
		t.Fatalf("after mutating caller's key: %v", err)
	}

	long := strings.Repeat("a", MaxKIDLen)
	if _, err := NewKeyring(long, map[string][]byte{long: k0}); err != nil {
		t.Errorf("%d-char kid rejected: %v", MaxKIDLen, err)
	}
	if _, err := NewKeyring("A-z_9", map[string][]byte{"A-z_9": k0}); err != nil {
		t.Errorf("kid with all allowed classes rejected: %v", err)
	}
}

func TestNewKeyringErrors(t *testing.T) {
	good := testKey("good")
	for _, tc := range []struct {
		name    string
		current string
		keys    map[string][]byte
		want    string
	}{
		{"no keys", "k1", nil, "no keys"},
		{"empty map", "k1", map[string][]byte{}, "no keys"},
		{"short key", "k1", map[string][]byte{"k1": good[:31]}, "31 bytes"},
		{"nil key", "k1", map[string][]byte{"k1": nil}, "0 bytes"},
		{"empty kid", "", map[string][]byte{"": good}, "invalid key ID"},
		{"long kid", strings.Repeat("a", 17), map[string][]byte{strings.Repeat("a", 17): good}, "invalid key ID"},
		{"dot in kid", "k.1", map[string][]byte{"k.1": good}, "invalid key ID"},
		{"colon in kid", "k:1", map[string][]byte{"k:1": good}, "invalid key ID"},
		{"space in kid", "k 1", map[string][]byte{"k 1": good}, "invalid key ID"},
		{"non-ascii kid", "kö", map[string][]byte{"kö": good}, "invalid key ID"},
		{"current missing", "k2", map[string][]byte{"k1": good}, `current key ID "k2" has no key`},
		{"current invalid", "", map[string][]byte{"k1": good}, "invalid current key ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ring, err := NewKeyring(tc.current, tc.keys)
			if err == nil {
				t.Fatalf("NewKeyring succeeded: %v", ring)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
			if strings.Contains(err.Error(), hex.EncodeToString(good[:8])) {
				t.Errorf("error %q leaks key material", err)
			}
		})
	}
}

func TestParseKeyring(t *testing.T) {
	k0, k1 := testKey("k0"), testKey("k1")
	long := testKey("long")
	long = append(long, long...) // 64 bytes
	for _, tc := range []struct {
		name    string
		spec    string
		current string
		keys    map[string][]byte
	}{
		{"hex", "k1:" + hex.EncodeToString(k1), "k1", map[string][]byte{"k1": k1}},
		{"upper hex", "k1:" + strings.ToUpper(hex.EncodeToString(k1)), "k1", map[string][]byte{"k1": k1}},
		{"first is current", "k1:" + hex.EncodeToString(k1) + ",k0:" + hex.EncodeToString(k0), "k1", map[string][]byte{"k0": k0, "k1": k1}},
		{"first is current, reversed", "k0:" + hex.EncodeToString(k0) + ",k1:" + hex.EncodeToString(k1), "k0", map[string][]byte{"k0": k0, "k1": k1}},
		{"std base64", "k1:" + base64.StdEncoding.EncodeToString(k1), "k1", map[string][]byte{"k1": k1}},
		{"raw std base64", "k1:" + base64.RawStdEncoding.EncodeToString(k1), "k1", map[string][]byte{"k1": k1}},
		{"url base64", "k1:" + base64.URLEncoding.EncodeToString(k1), "k1", map[string][]byte{"k1": k1}},
		{"raw url base64", "k1:" + base64.RawURLEncoding.EncodeToString(k1), "k1", map[string][]byte{"k1": k1}},
		{"64-byte key", "big:" + hex.EncodeToString(long), "big", map[string][]byte{"big": long}},
		{"spaces", "  k1 : " + hex.EncodeToString(k1) + " ,\tk0:" + hex.EncodeToString(k0) + " ", "k1", map[string][]byte{"k0": k0, "k1": k1}},
		{"explicit hex", "k1:hex:" + hex.EncodeToString(k1), "k1", map[string][]byte{"k1": k1}},
		// 64 hex digits are also valid base64 (of 48 bytes); the prefix picks base64.
		{"explicit base64 of hex-looking text", "k1:base64:" + hex.EncodeToString(k1), "k1", map[string][]byte{"k1": mustB64(hex.EncodeToString(k1))}},
		{"hex wins when ambiguous", "k1:" + hex.EncodeToString(k1), "k1", map[string][]byte{"k1": k1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ring, err := ParseKeyring(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if ring.current != tc.current {
				t.Errorf("current = %q, want %q", ring.current, tc.current)
			}
			if len(ring.keys) != len(tc.keys) {
				t.Fatalf("got %d keys, want %d", len(ring.keys), len(tc.keys))
			}
			for kid, want := range tc.keys {
				if !bytes.Equal(ring.keys[kid], want) {
					t.Errorf("key %q differs", kid)
				}
			}
		})
	}
}

func mustB64(s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func TestParseKeyringErrors(t *testing.T) {
	key := hex.EncodeToString(testKey("k1"))
	short := hex.EncodeToString(testKey("short")[:16])
	notKey := "!!" + key[2:] // neither hex nor base64
	for _, tc := range []struct {
		name string
		spec string
		want string
	}{
		{"empty", "", "spec is empty"},
		{"blank", " \t ", "spec is empty"},
		{"no colon", key, "entry 1: want <kid>:<key>"},
		{"no colon, second entry", "k1:" + key + "," + key, "entry 2: want <kid>:<key>"},
		{"empty kid", ":" + key, "entry 1: invalid key ID"},
		{"kid too long", strings.Repeat("k", 17) + ":" + key, "entry 1: invalid key ID"},
		{"kid with dot", "k.1:" + key, "entry 1: invalid key ID"},
		{"empty key", "k1:", `entry 1 (key ID "k1"): key is empty`},
		{"not hex or base64", "k1:" + notKey, `entry 1 (key ID "k1"): key is neither valid hex nor valid base64`},
		{"base64 with newline", "k1:" + base64.StdEncoding.EncodeToString(testKey("x"))[:20] + "\n" + base64.StdEncoding.EncodeToString(testKey("x"))[20:], "neither valid hex nor valid base64"},
		{"bad explicit hex", "k1:hex:" + notKey, `entry 1 (key ID "k1"): key is not valid hex`},
		{"bad explicit base64", "k1:base64:" + key[:10] + "!!", `entry 1 (key ID "k1"): key is not valid base64`},
		{"short key", "k1:" + short, `entry 1 (key ID "k1"): key is 16 bytes, need at least 32`},
		{"short second key", "k1:" + key + ",k0:" + short, `entry 2 (key ID "k0"): key is 16 bytes`},
		{"duplicate kid", "k1:" + key + ",k1:" + key, `entry 2: duplicate key ID "k1"`},
		{"trailing comma", "k1:" + key + ",", "entry 2 is empty"},
		{"empty middle entry", "k1:" + key + ",,k0:" + key, "entry 2 is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ring, err := ParseKeyring(tc.spec)
			if err == nil {
				t.Fatalf("ParseKeyring succeeded: %v", ring)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not mention %q", msg, tc.want)
			}
			// Never echo key material, whole or in part.
			for _, secret := range []string{key, short, notKey} {
				for i := 0; i+8 <= len(secret); i += 8 {
					if strings.Contains(msg, secret[i:i+8]) {
						t.Fatalf("error %q leaks key material", msg)
					}
				}
			}
		})
	}
}

func TestGenerateKey(t *testing.T) {
	a, b := GenerateKey(), GenerateKey()
	if len(a) != MinKeyLen || len(b) != MinKeyLen {
		t.Fatalf("lengths %d, %d; want %d", len(a), len(b), MinKeyLen)
	}
	if bytes.Equal(a, b) {
		t.Fatal("two generated keys are equal")
	}
	h := GenerateKeyHex()
	if len(h) != 2*MinKeyLen {
		t.Fatalf("hex key has %d chars", len(h))
	}
	ring, err := ParseKeyring("dev:" + h)
	if err != nil {
		t.Fatal(err)
	}
	s := ring.SealHandle(Handle{Tenant: "t", WorkflowID: "t/eval/k", Kind: "eval", Expiry: testNow.Add(time.Minute)})
	if _, err := ring.OpenHandle(s, testNow); err != nil {
		t.Fatal(err)
	}
}

func TestKeyringNeverPrintsKeys(t *testing.T) {
	ring := testRing(t)
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("ring", "ring", ring)
	outs := []string{
		fmt.Sprint(ring), fmt.Sprintf("%v %+v %#v %s %q %x", ring, ring, ring, ring, ring, ring),
		fmt.Sprintf("%v", *ring), fmt.Sprintf("%+v %#v %d %x", *ring, *ring, *ring, *ring), fmt.Sprintf("%d", ring),
		fmt.Sprintf("%v", []any{ring, *ring}), logged.String(),
	}
	for _, out := range outs {
		for _, key := range ring.keys {
			for _, enc := range []string{hex.EncodeToString(key[:6]), fmt.Sprint(key[:6])[1:12], base64.StdEncoding.EncodeToString(key[:6])} {
				if strings.Contains(out, enc) {
					t.Errorf("output %q contains key material", out)
				}
			}
		}
	}
	var nilRing *Keyring
	if got := fmt.Sprintf("%v|%s|%d", nilRing, nilRing.KIDs(), len(nilRing.CurrentKID())); got != "<nil>|[]|0" {
		t.Errorf("nil ring formats as %q", got)
	}
	if !strings.Contains(logged.String(), "current=k1") {
		t.Errorf("slog output %q lacks the current kid", logged.String())
	}
}
