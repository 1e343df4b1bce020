package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"slices"
	"time"

	"golang.org/x/oauth2"
)

// browserLogin runs authorization code + PKCE (S256) with a loopback redirect (RFC 8252 §7.3):
// a listener on 127.0.0.1 on a port the system picks, the state checked on the callback.
func browserLogin(ctx context.Context, cfg *oauth2.Config, m *serverMetadata, resource string, o loginOpts, stdout io.Writer) (*oauth2.Token, error) {
	if m.AuthorizationEndpoint == "" {
		return nil, fmt.Errorf("login: %s has no authorization_endpoint; sign in without --browser", m.Issuer)
	}
	if len(m.CodeChallengeMethods) > 0 && !slices.Contains(m.CodeChallengeMethods, "S256") {
		// Metadata that lists methods without S256 cannot do PKCE as MCP requires it. (Some IdPs,
		// e.g. Entra ID, support S256 without listing any: absent is accepted.)
		return nil, fmt.Errorf("login: %s does not support PKCE S256 (code_challenge_methods_supported %v)", m.Issuer, m.CodeChallengeMethods)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("login: loopback listener for the redirect: %w", err)
	}
	c := *cfg
	c.RedirectURL = fmt.Sprintf("http://127.0.0.1:%d/callback", ln.Addr().(*net.TCPAddr).Port)
	state := rand.Text()
	verifier := oauth2.GenerateVerifier()
	authURL := c.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", resource))

	type result struct {
		code string
		err  error
	}
	done := make(chan result, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /callback", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(state)) != 1 {
			// Not this login's redirect (a stale tab, or a page trying to plant its own code):
			// refuse it and keep waiting for the real one.
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, page("Sign-in refused", "This redirect does not belong to the sign-in jobgate is waiting for (state mismatch)."))
			return
		}
		var res result
		// RFC 9207 §2.4: a response naming another issuer is a mix-up (a code from another
		// IdP, or one an attacker's IdP obtained, to be redeemed here): refuse it, error
		// responses included; and an IdP that says it sends iss must send it. Compared as
		// strings, against the issuer its metadata names.
		iss, hasIss := q.Get("iss"), q.Has("iss")
		switch e := q.Get("error"); {
		case hasIss && iss != m.Issuer:
			res.err = fmt.Errorf("login: the sign-in response names issuer %q, not %s (RFC 9207: a mix-up of identity providers); nothing was stored", cleanText(iss), m.Issuer)
		case !hasIss && m.IssInResponse:
			res.err = fmt.Errorf("login: the sign-in response has no iss, though %s advertises authorization_response_iss_parameter_supported (RFC 9207); nothing was stored", m.Issuer)
		case e != "":
			res.err = idpError("browser sign-in", c.ClientID, &oauth2.RetrieveError{ErrorCode: e, ErrorDescription: q.Get("error_description")})
		case q.Get("code") == "":
			res.err = errors.New("login: the identity provider redirected back without a code")
		default:
			res.code = q.Get("code")
		}
		if res.err != nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, page("Sign-in failed", res.err.Error()))
		} else {
			fmt.Fprint(w, page("Signed in", "jobgate has the sign-in. You can close this tab and return to the terminal."))
		}
		select {
		case done <- res:
		default:
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()

	fmt.Fprintf(stdout, "To sign in, open this URL in a browser (waiting up to %s):\n\n    %s\n\n", shortDuration(o.timeout), authURL)
	if o.open {
		openBrowser(authURL)
	}
	timer := time.NewTimer(o.timeout)
	defer timer.Stop()
	var res result
	select {
	case res = <-done:
	case <-timer.C:
		return nil, fmt.Errorf("login: no sign-in came back within %s; run 'jobgate login --browser' again", shortDuration(o.timeout))
	case <-ctx.Done():
		return nil, errors.New("login: stopped; nothing was stored")
	}
	if res.err != nil {
		return nil, res.err
	}
	tok, err := c.Exchange(ctx, res.code, oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, idpError("code exchange", c.ClientID, err)
	}
	return tok, nil
}

// openBrowser starts the desktop's URL opener, if there is one; failures are silent because
// the URL is printed anyway.
func openBrowser(u string) {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return
	}
	cmd := exec.Command(p, u)
	if cmd.Start() == nil {
		go func() { _ = cmd.Wait() }()
	}
}

func page(title, msg string) string {
	return "<!doctype html><meta charset=utf-8><title>jobgate: " + html.EscapeString(title) + "</title><h1>" +
		html.EscapeString(title) + "</h1><p>" + html.EscapeString(msg) + "</p>\n"
}
