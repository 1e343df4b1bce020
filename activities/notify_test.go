package activities

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.temporal.io/sdk/testsuite"

	"github.com/jobgate/jobgate/activities/contract"
	"github.com/jobgate/jobgate/authz"
)

// TestNotifySecretSpecVector: a whsec_ secret file signs exactly as the spec's test vector
// (standard-webhooks libraries/go webhook_test.go, TestSign).
func TestNotifySecretSpecVector(t *testing.T) {
	secret, err := ReadNotifySecret([]byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n"))
	if err != nil {
		t.Fatal(err)
	}
	wh, _ := standardwebhooks.NewWebhookRaw(secret)
	sig, err := wh.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if err != nil || sig != "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" {
		t.Fatalf("signature %q, %v", sig, err)
	}
	// Weak secrets are refused (review finding 10): fewer than 24 bytes after decoding.
	for _, bad := range []string{"", "  \n", "whsec_!!notbase64", "k", "whsec_c2hvcnQ=", "23 bytes of raw secret.",
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLa"} {
		if _, err := ReadNotifySecret([]byte(bad)); err == nil {
			t.Errorf("secret %q accepted", bad)
		}
	}
}

type notifyHit struct {
	header http.Header
	body   []byte
}

// TestNotifyOutcomes: a 2xx is delivered (signed, with the event's ID as webhook-id), a 410 is
// rejected for good, a 500 fails the attempt (retried), and a retry skips what is done.
func TestNotifyOutcomes(t *testing.T) {
	var mu sync.Mutex
	got := map[string][]notifyHit{}
	status := map[string]int{"/ok": 204, "/gone": 410, "/down": 500, "/busy": 429}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[r.URL.Path] = append(got[r.URL.Path], notifyHit{r.Header.Clone(), b})
		mu.Unlock()
		w.WriteHeader(status[r.URL.Path])
	}))
	defer srv.Close()
	secret := []byte("0123456789abcdef0123456789abcdef")
	target := func(path, format string) NotifyTarget {
		return NotifyTarget{NotifyEndpoint: authz.NotifyEndpoint{Name: path, URL: srv.URL + path, Format: format, AllowPrivate: true}, Secret: secret}
	}
	var observed []string
	n := &Notifier{PublicURL: "https://jobgate.example/", Targets: func(tenant, event string) []NotifyTarget {
		if tenant != "acme" || event != authz.EventApprovalRequested {
			return nil
		}
		return []NotifyTarget{target("/ok", ""), target("/gone", "slack"), target("/down", ""), target("/busy", "")}
	}, Observe: func(e, o string) { observed = append(observed, e+"="+o) }}
	ev := contract.NotifyEvent{ID: "evt_1", Type: authz.EventApprovalRequested, Tenant: "acme", JobID: "acme/export/ana/k 1",
		Kind: "export", Meaning: "Allow ana to export email", At: time.Unix(1700000000, 0)}

	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(n.Notify)
	_, err := env.ExecuteActivity(n.Notify, contract.NotifyInput{Event: ev})
	if err == nil || !strings.Contains(err.Error(), "/down: HTTP 500") || !strings.Contains(err.Error(), "/busy: HTTP 429") {
		t.Fatalf("error %v, want the 500 and 429 endpoints pending", err)
	}
	want := "/ok=delivered /gone=rejected /down=retry /busy=retry"
	if strings.Join(observed, " ") != want {
		t.Fatalf("outcomes %v, want %s", observed, want)
	}
	wh, _ := standardwebhooks.NewWebhookRaw(secret)
	ok := got["/ok"][0]
	if err := wh.Verify(ok.body, ok.header); err != nil || ok.header.Get("webhook-id") != "evt_1" {
		t.Fatalf("delivery not verifiable: %v, id %q", err, ok.header.Get("webhook-id"))
	}
	var std struct {
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal(ok.body, &std); err != nil {
		t.Fatal(err)
	}
	if std.Type != "approval.requested" || std.Data["link"] != "https://jobgate.example/approvals/acme%2Fexport%2Fana%2Fk%201" || std.Data["meaning"] != ev.Meaning {
		t.Fatalf("standard body %s", ok.body)
	}
	slack := string(got["/gone"][0].body)
	if !strings.Contains(slack, `"blocks"`) || !strings.Contains(slack, `"url":"https://jobgate.example/approvals/acme%2Fexport%2Fana%2Fk%201"`) {
		t.Fatalf("slack body %s", slack)
	}
	if wh.Verify(got["/gone"][0].body, got["/gone"][0].header) != nil {
		t.Fatal("slack delivery not signed")
	}
}

// TestNotifyRefusesPrivateAtDial: without allow_private, the dialer refuses the address it
// would connect to, whatever name led there (here localhost, resolving to loopback).
func TestNotifyRefusesPrivateAtDial(t *testing.T) {
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	defer srv.Close()
	u := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	n := &Notifier{}
	out, err := n.deliver(t.Context(), NotifyTarget{NotifyEndpoint: authz.NotifyEndpoint{URL: u}, Secret: []byte("0123456789abcdef01234567")},
		contract.NotifyEvent{ID: "evt_2", Type: authz.EventApprovalRequested})
	var refused *refusedAddrError
	if out != contract.OutcomeRefused || !errors.As(err, &refused) || hits != 0 {
		t.Fatalf("outcome %s, error %v, hits %d: want refused before connecting", out, err, hits)
	}
	if out, err := n.deliver(t.Context(), NotifyTarget{NotifyEndpoint: authz.NotifyEndpoint{URL: u, AllowPrivate: true}, Secret: []byte("0123456789abcdef01234567")},
		contract.NotifyEvent{ID: "evt_2", Type: authz.EventApprovalRequested}); out != contract.OutcomeDelivered || err != nil || hits != 1 {
		t.Fatalf("allow_private: outcome %s, %v, hits %d", out, err, hits)
	}
}

// TestNotifyErrorsKeepTheURLOut: a failed delivery's error (logged, and recorded in history as
// the attempt's failure) never carries the URL, whose path may be the endpoint's credential.
func TestNotifyErrorsKeepTheURLOut(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	u := srv.URL + "/services/T000/B000/s3cr3tpath"
	srv.Close() // nothing listens any more: a connection error
	n := &Notifier{}
	out, err := n.deliver(t.Context(), NotifyTarget{NotifyEndpoint: authz.NotifyEndpoint{URL: u, AllowPrivate: true}, Secret: []byte("0123456789abcdef01234567")},
		contract.NotifyEvent{ID: "evt_3", Type: authz.EventApprovalRequested})
	if out != contract.OutcomeRetry || err == nil || strings.Contains(err.Error(), "s3cr3tpath") {
		t.Fatalf("outcome %s, error %v: want a retry whose error leaves the URL out", out, err)
	}
}

// FuzzReadNotifySecret: any secret file either gives a non-empty key or an error; never a panic.
func FuzzReadNotifySecret(f *testing.F) {
	f.Add([]byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"))
	f.Add([]byte("plain secret\n"))
	f.Add([]byte("a plain secret of 24 byte\n"))
	f.Add([]byte("whsec_"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		k, err := ReadNotifySecret(raw)
		if err == nil && len(k) < MinNotifySecretLen {
			t.Fatalf("secret %q gave a %d-byte key", raw, len(k))
		}
	})
}

// TestNotifySlackEscapesRequesterText: the requester's free text (in Meaning), and every other
// field put in the Slack message, cannot make a link or a mention: & < > arrive escaped, and
// the section is verbatim (no auto-linking). Review finding 5.
func TestNotifySlackEscapesRequesterText(t *testing.T) {
	n := &Notifier{PublicURL: "https://jobgate.example"}
	ev := contract.NotifyEvent{ID: "evt_4", Type: authz.EventJobFinished, Tenant: "acme", JobID: "acme/export/ana/<x>",
		Kind: "export<!here>", Status: "failed<@U1>", At: time.Unix(1700000000, 0),
		Meaning: "Allow ana to export email for '<https://evil.example/approve|Approve here> & <!channel>'"}
	body, err := n.Body(ev, authz.NotifyFormatSlack)
	if err != nil {
		t.Fatal(err)
	}
	var msg struct {
		Text   string `json:"text"`
		Blocks []struct {
			Type string `json:"type"`
			Text struct {
				Text     string `json:"text"`
				Verbatim bool   `json:"verbatim"`
			} `json:"text"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal(body, &msg); err != nil {
		t.Fatal(err)
	}
	sec := msg.Blocks[0].Text
	for _, text := range []string{msg.Text, sec.Text} {
		if strings.ContainsAny(text, "<>") {
			t.Fatalf("unescaped Slack text %q", text)
		}
	}
	want := "*Job failed&lt;@U1&gt;* (export&lt;!here&gt;, acme/export/ana/&lt;x&gt;)\n" +
		"Allow ana to export email for '&lt;https://evil.example/approve|Approve here&gt; &amp; &lt;!channel&gt;'"
	if sec.Text != want || !sec.Verbatim {
		t.Fatalf("section %q (verbatim %v), want %q", sec.Text, sec.Verbatim, want)
	}
}

// TestNotifyClientKept: deliveries reuse one client per allow_private value instead of a new
// Transport (and its idle connections) per delivery. Review finding 19.
func TestNotifyClientKept(t *testing.T) {
	n := &Notifier{}
	a, b := n.clientFor(false), n.clientFor(false)
	p, q := n.clientFor(true), n.clientFor(true)
	if a != b || p != q || a == p {
		t.Fatalf("clients %p %p (refusing) %p %p (allow_private): want one kept per kind", a, b, p, q)
	}
}

// TestNotifyBodyErrorCode: the Standard Webhooks body of job.finished carries status and, when
// the job did not succeed, error_code; a succeeded job's body has no error_code key.
func TestNotifyBodyErrorCode(t *testing.T) {
	n := &Notifier{PublicURL: "https://jobgate.example"}
	ev := contract.NotifyEvent{ID: "evt_5", Type: authz.EventJobFinished, Tenant: "acme", JobID: "acme/eval/ana/k",
		Kind: "eval", Status: "cancelled", ErrorCode: "cancelled", At: time.Unix(1700000000, 0),
		Meaning: "The eval job of ana ended: cancelled (cancelled)"}
	for _, tc := range []struct {
		code string
		want any
	}{{"cancelled", "cancelled"}, {"", nil}} {
		ev.ErrorCode = tc.code
		body, err := n.Body(ev, authz.NotifyFormatStandard)
		if err != nil {
			t.Fatal(err)
		}
		var msg struct {
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal(body, &msg); err != nil {
			t.Fatal(err)
		}
		if got, ok := msg.Data["error_code"]; got != tc.want || ok != (tc.want != nil) {
			t.Fatalf("error_code %v (present %v), want %v in %s", got, ok, tc.want, body)
		}
		if msg.Data["status"] != "cancelled" || msg.Data["link"] != "https://jobgate.example/jobs/acme%2Feval%2Fana%2Fk" {
			t.Fatalf("body %s", body)
		}
	}
}
