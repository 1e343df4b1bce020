package authz

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestParseTenantsNotify: endpoints load only with a public http(s) URL, a secret file, known
// events and format; a refusal is one line naming the field.
func TestParseTenantsNotify(t *testing.T) {
	ep := func(fields string) string {
		return `{"defaults":{},"notify":{"acme":[{` + fields + `}]}}`
	}
	for _, tc := range []struct{ raw, want string }{
		{ep(`"url":"http://127.0.0.1:9/hook","secret_file":"s"`), `tenants file: notify.acme[0].url: "http://127.0.0.1:9" names a loopback address; set "allow_private": true on this endpoint to allow it`},
		{ep(`"url":"https://localhost/x","secret_file":"s"`), "notify.acme[0].url: \"https://localhost\" names a loopback address"},
		{ep(`"url":"https://10.1.2.3/x","secret_file":"s"`), "names a private address"},
		{ep(`"url":"http://169.254.169.254/latest","secret_file":"s"`), "names a link-local address"},
		{ep(`"url":"http://[::1]/x","secret_file":"s"`), "names a loopback address"},
		{ep(`"url":"http://[::ffff:192.168.0.1]/x","secret_file":"s"`), "names a private address"},
		{ep(`"url":"http://0.0.0.0/x","secret_file":"s"`), "names an unspecified address"},
		{ep(`"url":"ftp://hooks.example/x","secret_file":"s"`), "notify.acme[0].url: scheme \"ftp\": the scheme must be http or https"},
		// Embedded IPv4 and IANA special-purpose ranges (review finding 6).
		{ep(`"url":"http://[64:ff9b::a9fe:a9fe]/x","secret_file":"s"`), "names a link-local address (inside a NAT64 address)"},
		{ep(`"url":"http://[64:ff9b::7f00:1]/x","secret_file":"s"`), "names a loopback address (inside a NAT64 address)"},
		{ep(`"url":"http://[2002:7f00:1::1]/x","secret_file":"s"`), "names a loopback address (inside a 6to4 address)"},
		{ep(`"url":"http://[::7f00:1]/x","secret_file":"s"`), "names a loopback address (inside an IPv4-compatible address)"},
		{ep(`"url":"http://198.18.0.1/x","secret_file":"s"`), "names a benchmarking address"},
		{ep(`"url":"http://240.0.0.1/x","secret_file":"s"`), "names a reserved address"},
		{ep(`"url":"http://0.1.2.3/x","secret_file":"s"`), `names a "this network" address`},
		{ep(`"url":"http://192.0.0.1/x","secret_file":"s"`), "names an IETF protocol-assignment address"},
		// Errors show scheme and host only: a Slack URL's path is its secret (finding 7).
		{ep(`"url":"https://10.0.0.1/services/T0/B0/SECRETPATH?k=SECRETQ","secret_file":"s"`), `notify.acme[0].url: "https://10.0.0.1" names a private address`},
		{ep(`"url":"https://hooks.example/services/SECRETPATH%zz","secret_file":"s"`), `notify.acme[0].url: not a URL: invalid URL escape "%zz"`},
		{ep(`"url":"gopher://hooks.example/SECRETPATH","secret_file":"s"`), `notify.acme[0].url: scheme "gopher"`},
		{ep(`"url":"https:///SECRETPATH","secret_file":"s"`), `notify.acme[0].url: https:// has no host`},
		// A notify key that is not a tenant ID would never match (finding 19).
		{`{"defaults":{},"notify":{"Acme":[{"url":"https://hooks.example/x","secret_file":"s"}]}}`, `tenants file: notify: "Acme" is not a tenant ID`},
		{ep(`"url":"https://u:p@hooks.example/x","secret_file":"s"`), "notify.acme[0].url: user info is not allowed"},
		{ep(`"secret_file":"s"`), "notify.acme[0].url: required"},
		{ep(`"url":"https://hooks.example/x"`), "notify.acme[0].secret_file: required"},
		{ep(`"url":"https://hooks.example/x","secret_file":"s","events":["job.started"]`), `notify.acme[0].events: unknown event "job.started"`},
		{ep(`"url":"https://hooks.example/x","secret_file":"s","format":"teams"`), `notify.acme[0].format: "teams"`},
		{ep(`"url":"https://hooks.example/x","secret_file":"s","events":["job.progress"],"progress_every":"4s"`), `notify.acme[0].progress_every: 4s is below the minimum of 5s`},
		{ep(`"url":"https://hooks.example/x","secret_file":"s","events":["job.progress"],"progress_every":"30"`), `notify.acme[0].progress_every: "30" is not a duration`},
		{ep(`"url":"https://hooks.example/x","secret_file":"s","progress_every":"-1m"`), `notify.acme[0].progress_every: -1m is below the minimum of 5s`},
		{`{"defaults":{},"notify":{"acme":[{"url":"https://a.example/1","secret_file":"s"},{"url":"https://a.example/2","secret_file":"s"}]}}`, `notify.acme[1].name: "a.example" is used twice`},
	} {
		_, err := ParseTenants([]byte(tc.raw))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%s: error %v, want one line with %q", tc.raw, err, tc.want)
		}
	}
	ok := `{"defaults":{},"notify":{"acme":[{"name":"local","url":"http://127.0.0.1:9/hook","secret_file":"s","allow_private":true,"events":["job.finished"],"format":"slack"},
		{"url":"https://hooks.example/x","secret_file":"s"}]}}`
	ts, err := ParseTenants([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if got := ts.Endpoints("acme", EventApprovalRequested); len(got) != 1 || got[0].EndpointName() != "hooks.example" {
		t.Fatalf("approval endpoints %+v: want only the default-events one", got)
	}
	if got := ts.Endpoints("acme", EventJobFinished); len(got) != 1 || got[0].Name != "local" {
		t.Fatalf("job.finished endpoints %+v: want the opted-in one", got)
	}
	if got := ts.Endpoints("globex", EventApprovalRequested); len(got) != 0 {
		t.Fatalf("globex got acme's endpoints: %+v", got)
	}
	if got := ts.Endpoints("acme", EventJobProgress); len(got) != 0 {
		t.Fatalf("job.progress endpoints %+v: want none (opt-in)", got)
	}
}

// TestParseTenantsProgressEvery: job.progress is opt-in; its window defaults to 30s and takes
// any duration of at least 5s.
func TestParseTenantsProgressEvery(t *testing.T) {
	ts, err := ParseTenants([]byte(`{"defaults":{},"notify":{"acme":[
		{"name":"a","url":"https://a.example/x","secret_file":"s","events":["job.progress","job.finished"]},
		{"name":"b","url":"https://b.example/x","secret_file":"s","events":["job.progress"],"progress_every":"5s"},
		{"name":"c","url":"https://c.example/x","secret_file":"s","progress_every":"2m"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	got := ts.Endpoints("acme", EventJobProgress)
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Fatalf("job.progress endpoints %+v, want a and b", got)
	}
	if w := got[0].ProgressWindow(); w != 30*time.Second {
		t.Errorf("default window %s, want 30s", w)
	}
	if w := got[1].ProgressWindow(); w != 5*time.Second {
		t.Errorf("window %s, want 5s", w)
	}
	if w := ts.Notify["acme"][2].ProgressWindow(); w != 2*time.Minute {
		t.Errorf("window %s, want 2m", w)
	}
}

// TestPrivateIP: only global unicast addresses outside the IANA special-purpose ranges pass;
// an embedded IPv4 address decides for NAT64, 6to4 and IPv4-compatible addresses.
func TestPrivateIP(t *testing.T) {
	for _, a := range []string{
		"64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1", "64:ff9b::a00:1", "2002:7f00:1::1", "2002:a9fe:a9fe::1",
		"::7f00:1", "::808:808", "::ffff:127.0.0.1", "198.18.0.1", "198.19.255.255", "240.0.0.1",
		"255.255.255.255", "0.1.2.3", "192.0.0.1", "192.0.2.1", "198.51.100.1", "203.0.113.1",
		"192.88.99.1", "100.64.0.1", "64:ff9b:1::808:808", "100::1", "2001::1", "2001:db8::1",
		"3fff::1", "5f00::1", "fec0::1", "fe80::1%eth0", "fd00::1", "ff02::1", "::", "::1", "4000::1",
	} {
		if why := PrivateIP(netip.MustParseAddr(a)); why == "" {
			t.Errorf("%s counts as public", a)
		}
	}
	for _, a := range []string{"8.8.8.8", "1.1.1.1", "64:ff9b::808:808", "2002:808:808::1", "2606:4700::1111", "::ffff:8.8.8.8"} {
		if why := PrivateIP(netip.MustParseAddr(a)); why != "" {
			t.Errorf("%s refused: %s", a, why)
		}
	}
}

// FuzzParseTenants: any tenants file either parses into endpoints that all pass the checks,
// or is refused with an error; it never panics.
func FuzzParseTenants(f *testing.F) {
	f.Add([]byte(`{"defaults":{},"notify":{"acme":[{"url":"https://hooks.example/x","secret_file":"s"}]}}`))
	f.Add([]byte(`{"defaults":{"fairness_weight":2},"tenants":{"acme":{"running_jobs_per_owner":3}}}`))
	f.Add([]byte(`{"notify":{"acme":[{"url":"http://[fe80::1%25eth0]/x","secret_file":"s"}]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		ts, err := ParseTenants(raw)
		if err != nil {
			return
		}
		for tenant, list := range ts.Notify {
			if err := checkNotify(list); err != nil {
				t.Fatalf("accepted notify.%s that fails its checks: %v", tenant, err)
			}
		}
	})
}
