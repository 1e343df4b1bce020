package authz

import (
	"strings"
	"testing"
)

// TestParseTenantsNotify: endpoints load only with a public http(s) URL, a secret file, known
// events and format; a refusal is one line naming the field.
func TestParseTenantsNotify(t *testing.T) {
	ep := func(fields string) string {
		return `{"defaults":{},"notify":{"acme":[{` + fields + `}]}}`
	}
	for _, tc := range []struct{ raw, want string }{
		{ep(`"url":"http://127.0.0.1:9/hook","secret_file":"s"`), `tenants file: notify.acme[0].url: "http://127.0.0.1:9/hook" names a loopback address; set "allow_private": true on this endpoint to allow it`},
		{ep(`"url":"https://localhost/x","secret_file":"s"`), "notify.acme[0].url: \"https://localhost/x\" names a loopback address"},
		{ep(`"url":"https://10.1.2.3/x","secret_file":"s"`), "names a private address"},
		{ep(`"url":"http://169.254.169.254/latest","secret_file":"s"`), "names a link-local address"},
		{ep(`"url":"http://[::1]/x","secret_file":"s"`), "names a loopback address"},
		{ep(`"url":"http://[::ffff:192.168.0.1]/x","secret_file":"s"`), "names a private address"},
		{ep(`"url":"http://0.0.0.0/x","secret_file":"s"`), "names an unspecified address"},
		{ep(`"url":"ftp://hooks.example/x","secret_file":"s"`), "notify.acme[0].url: \"ftp://hooks.example/x\": the scheme must be http or https"},
		{ep(`"url":"https://u:p@hooks.example/x","secret_file":"s"`), "notify.acme[0].url: user info is not allowed"},
		{ep(`"secret_file":"s"`), "notify.acme[0].url: required"},
		{ep(`"url":"https://hooks.example/x"`), "notify.acme[0].secret_file: required"},
		{ep(`"url":"https://hooks.example/x","secret_file":"s","events":["job.started"]`), `notify.acme[0].events: unknown event "job.started"`},
		{ep(`"url":"https://hooks.example/x","secret_file":"s","format":"teams"`), `notify.acme[0].format: "teams"`},
		{`{"defaults":{},"notify":{"acme":[{"url":"https://a.example/1","secret_file":"s"},{"url":"https://a.example/2","secret_file":"s"}]}}`, `notify.acme[1].name: "a.example" is used twice`},
	} {
		_, err := ParseTenants([]byte(tc.raw))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
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
