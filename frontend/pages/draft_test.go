package pages

import (
	"html"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

var reReLogin = regexp.MustCompile(`href="(/approvals/[^"?]+\?[^"]*)"`)

// TestJobPages_CommentDraftSealed: a link the requester writes (…?comment=approved+as+asked)
// used to fill the approver's comment, which the approval then sealed as the approver's words.
// Now only a sealed draft fills the form: the one the "sign in again" answer links to, made
// for the person who typed it on that request, and only for them, on that request, for
// CommentDraftTTL. Before the fix the requester's link filled the steward's form.
func TestJobPages_CommentDraftSealed(t *testing.T) {
	e := newJobsEnv(t)
	e.awaiting(pageJobID, "ana")
	other := "acme/export/ana/q4"
	e.awaiting(other, "ana")
	fresh := e.session("steward", "acme", time.Minute, approver...)
	forged := reqPath + "?" + url.Values{"comment": {"approved as asked"}}.Encode()
	if r := e.do("GET", forged, fresh, nil); r.status != 200 || strings.Contains(r.body, "approved as asked") {
		t.Fatalf("GET %s as steward: %d; the requester's ?comment= filled the approver's form:\n%s", forged, r.status, r.body)
	}

	// The sign-in-again answer links back with a sealed draft, never the comment in clear.
	old := e.session("steward", "acme", time.Hour, approver...)
	r := e.do("POST", reqPath, old, decisionForm("csrf-steward", "approve", "sha256:d1", "approve", "ok for Q3 & only Q3"))
	m := reReLogin.FindStringSubmatch(r.body)
	if r.status != 403 || m == nil {
		t.Fatalf("approval with an old sign-in: %d, no re-login link:\n%s", r.status, r.body)
	}
	link := html.UnescapeString(m[1])
	lu, _ := url.Parse(link)
	if d := lu.Query().Get("draft"); !strings.HasPrefix(d, "jgt1.") || lu.Query().Has("comment") || strings.ContainsAny(lu.RawQuery, "+% &") {
		t.Fatalf("re-login link %s: want ?draft=jgt1.… and no comment in clear", link)
	}
	contains(t, e.do("GET", link, fresh, nil), 200, ">ok for Q3 &amp; only Q3</textarea>")

	// Someone else (another approver, the requester) opening it, or the draft on another
	// request, or the draft tampered with: nothing filled.
	sam := e.session("sam", "acme", time.Minute, approver...)
	ana := e.session("ana", "acme", time.Minute, approver...)
	onOther := ApprovalPath(other) + "?" + lu.RawQuery
	d := lu.Query().Get("draft")
	tampered := reqPath + "?" + url.Values{"draft": {d[:len(d)-2] + "AA"}}.Encode()
	for _, c := range []struct{ who, cookie, path string }{
		{"sam", sam, link}, {"ana", ana, link}, {"steward", fresh, onOther}, {"steward", fresh, tampered},
	} {
		if r := e.do("GET", c.path, c.cookie, nil); strings.Contains(r.body, "only Q3") {
			t.Errorf("GET %s as %s: %d, the draft filled the form", c.path, c.who, r.status)
		}
	}
	// Past its lifetime it fills nothing either.
	e.jobs.now = fakeNow.Add(16 * time.Minute)
	if r := e.do("GET", link, e.session("steward", "acme", time.Minute, approver...), nil); strings.Contains(r.body, "only Q3") {
		t.Errorf("an expired draft filled the form (%d)", r.status)
	}
}
