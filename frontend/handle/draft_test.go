package handle

import (
	"errors"
	"strings"
	"testing"
)

// TestCommentDraft: a draft opens to what was sealed, under every key of the ring; it never
// opens as a session or a login state (nor they as a draft); past its expiry it is ErrExpired;
// a comment too long for a re-login link seals to "" with Validate saying why.
func TestCommentDraft(t *testing.T) {
	ring := testRing(t)
	d := CommentDraft{Issuer: "https://idp.example", Subject: "steward", Tenant: "acme", Job: "acme/export/ana/q3",
		Comment: "ok for Q3 & only Q3", Expiry: fuzzNow.Add(CommentDraftTTL)}
	s := ring.SealCommentDraft(d)
	if !strings.HasPrefix(s, CommentDraftPrefix+"."+ring.CurrentKID()+".") || strings.Contains(s, "Q3") {
		t.Fatalf("sealed draft %q", s)
	}
	got, err := ring.OpenCommentDraft(s, fuzzNow)
	if err != nil || got != d {
		t.Fatalf("open: %+v %v, want %+v", got, err, d)
	}
	if _, err := ring.OpenCommentDraft(s, d.Expiry); !errors.Is(err, ErrExpired) {
		t.Fatalf("open at expiry: %v, want ErrExpired", err)
	}
	if _, err := ring.OpenSession(s, fuzzNow); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a draft opened as a session: %v", err)
	}
	for _, other := range []string{ring.SealSession(testSession()), ring.SealLoginState(testLoginState()),
		SessionPrefix + s[len(CommentDraftPrefix):], s[:len(s)-2] + "AA"} {
		if _, err := ring.OpenCommentDraft(other, fuzzNow); !errors.Is(err, ErrMalformed) {
			t.Fatalf("OpenCommentDraft(%.20s…): %v, want ErrMalformed", other, err)
		}
	}
	long := d
	long.Comment = strings.Repeat("x", 800)
	if ring.SealCommentDraft(long) != "" || long.Validate() == nil || !strings.Contains(long.Validate().Error(), "comment draft") {
		t.Fatalf("a draft over MaxCommentDraftLen: sealed %q, Validate %v", ring.SealCommentDraft(long), long.Validate())
	}
	empty := d
	empty.Comment = ""
	if err := empty.Validate(); err == nil || !strings.Contains(err.Error(), "comment") {
		t.Fatalf("Validate of an empty comment: %v, want an error naming comment", err)
	}
}
