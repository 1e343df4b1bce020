package app

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestBindEnv(t *testing.T) {
	newFS := func() (*flag.FlagSet, *ServeConfig) {
		var c ServeConfig
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.Flags(fs)
		return fs, &c
	}
	t.Run("EnvSetsAndFlagWins", func(t *testing.T) {
		t.Setenv("JOBGATE_ISSUER", "https://from-env")
		t.Setenv("JOBGATE_HANDLE_TTL", "2h")
		fs, c := newFS()
		if err := BindEnv(fs); err != nil {
			t.Fatal(err)
		}
		if err := fs.Parse([]string{"--issuer", "https://from-flag"}); err != nil {
			t.Fatal(err)
		}
		if c.Issuer != "https://from-flag" || c.HandleTTL != 2*time.Hour {
			t.Fatalf("issuer %q ttl %s", c.Issuer, c.HandleTTL)
		}
		if u := fs.Lookup("temporal-address").Usage; !strings.Contains(u, "(env JOBGATE_TEMPORAL_ADDRESS)") {
			t.Fatalf("usage %q", u)
		}
	})
	t.Run("BadValueIsAnErrorNamingTheVariable", func(t *testing.T) {
		t.Setenv("JOBGATE_HANDLE_TTL", "a week")
		fs, _ := newFS()
		err := BindEnv(fs)
		if err == nil || !strings.Contains(err.Error(), "JOBGATE_HANDLE_TTL") {
			t.Fatalf("err %v", err)
		}
	})
}
