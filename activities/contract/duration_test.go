package contract

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestDurationJSON: durations are written as strings; strings and the nanosecond numbers of
// recorded workflow inputs are both read.
func TestDurationJSON(t *testing.T) {
	b, err := json.Marshal(struct{ D Duration }{Duration(36 * time.Hour)})
	if err != nil || string(b) != `{"D":"36h0m0s"}` {
		t.Fatalf("marshal: %s, %v", b, err)
	}
	for in, want := range map[string]time.Duration{
		`"90s"`:           90 * time.Second,
		`"24h0m0s"`:       24 * time.Hour,
		`3600000000000`:   time.Hour, // a workflow input recorded before durations were strings
		`0`:               0,
		`"-1m"`:           -time.Minute,
		`"1h30m0.5s"`:     time.Hour + 30*time.Minute + 500*time.Millisecond,
		`86400000000000 `: 24 * time.Hour,
	} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err != nil || d.D() != want {
			t.Errorf("unmarshal %s: %v, %v; want %v", in, d.D(), err, want)
		}
	}
	for _, in := range []string{`"soon"`, `true`, `1.5`, `{}`, `["1s"]`} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err == nil {
			t.Errorf("unmarshal %s: no error, got %v", in, d.D())
		}
	}
}

// TestConfigDurationsAreStrings: a config file that writes a duration as a number is refused,
// naming the field (Duration itself would read it as nanoseconds).
func TestConfigDurationsAreStrings(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{`{"suites":[{"name":"d","kind":"demo","episode_timeout":90}]}`, `suites[0]: episode_timeout: duration must be a string like "90s", got 90`},
		{`{"suites":[{"name":"d","kind":"demo","approval_timeout":"2h"},{"name":"e","kind":"demo","request_timeout":1000000000}]}`, `suites[1]: request_timeout: duration must be a string`},
		{`{"suites":[{"name":"d","kind":"demo","heartbeat_timeout":"often"}]}`, `invalid duration "often"`},
	} {
		if _, err := ParseCatalog([]byte(c.doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseCatalog(%s): %v; want %q", c.doc, err, c.want)
		}
	}
	if _, err := ParseCatalog([]byte(`{"suites":[{"name":"d","kind":"demo","episode_timeout":"90s","heartbeat_timeout":"10s"}]}`)); err != nil {
		t.Errorf("string durations: %v", err)
	}
	_, err := ParseDatasets([]byte(`{"datasets":[{"name":"ds","dsn":"x.db","table":"t","key_column":"id",
		"tenant_column":"tenant","columns":[{"name":"id"}],"retention":172800000000000}]}`))
	if err == nil || !strings.Contains(err.Error(), `dataset "ds": retention: duration must be a string like "90s"`) {
		t.Errorf("numeric retention: %v", err)
	}
	if _, err := ParseDatasets([]byte(`{"datasets":[{"name":"ds","dsn":"x.db","table":"t","key_column":"id",
		"tenant_column":"tenant","columns":[{"name":"id"}],"retention":"48h"}]}`)); err != nil {
		t.Errorf("string retention: %v", err)
	}
}

// FuzzDuration: Duration never panics on input, and what it reads it writes back as a string
// it reads again to the same value.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{`"90s"`, `3600000000000`, `"-1m"`, `null`, `"1h2m3.5s"`, `1e3`, `"9223372036854775807ns"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var d Duration
		if json.Unmarshal(b, &d) != nil {
			return
		}
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatalf("marshal %v: %v", d.D(), err)
		}
		var back Duration
		if err := json.Unmarshal(out, &back); err != nil || back != d {
			t.Fatalf("%s -> %s -> %v, %v; want %v", b, out, back.D(), err, d.D())
		}
	})
}
