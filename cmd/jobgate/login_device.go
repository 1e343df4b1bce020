package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/oauth2"
)

// deviceLogin runs the device authorization grant: it prints where to go and the code, then
// polls at the interval the IdP asks for (slower on slow_down) until the person answers or the
// code expires.
func deviceLogin(ctx context.Context, cfg *oauth2.Config, m *serverMetadata, stdout io.Writer) (*oauth2.Token, error) {
	if m.DeviceAuthorizationEndpoint == "" {
		return nil, fmt.Errorf("login: %s offers no device authorization (RFC 8628); sign in with --browser", m.Issuer)
	}
	da, err := cfg.DeviceAuth(ctx)
	if err != nil {
		return nil, idpError("device authorization", cfg.ClientID, err)
	}
	if da.VerificationURI == "" || da.UserCode == "" || da.DeviceCode == "" {
		return nil, fmt.Errorf("login: %s answered the device authorization without a verification_uri, user_code or device_code", m.Issuer)
	}
	// The IdP's text goes to a terminal: cleanText drops control characters, so an IdP (or
	// whoever answers in its place) cannot send escape sequences that rewrite the screen, the
	// window title or the clipboard.
	var b strings.Builder
	fmt.Fprintf(&b, "To sign in, open\n\n    %s\n\nand enter the code\n\n    %s\n\n", cleanText(da.VerificationURI), cleanText(da.UserCode))
	if da.VerificationURIComplete != "" {
		fmt.Fprintf(&b, "(or open %s)\n", cleanText(da.VerificationURIComplete))
	}
	if !da.Expiry.IsZero() {
		fmt.Fprintf(&b, "Waiting for you to approve (the code expires in %s)...\n", shortDuration(time.Until(da.Expiry).Round(time.Second)))
	}
	fmt.Fprint(stdout, b.String())
	tok, err := cfg.DeviceAccessToken(ctx, da)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			// x/oauth2 stops polling at the code's expiry by its own deadline.
			return nil, errors.New("login: the device code expired before it was approved; run 'jobgate login' again")
		}
		if ctx.Err() != nil {
			return nil, errors.New("login: stopped; nothing was stored")
		}
		return nil, idpError("device sign-in", cfg.ClientID, err)
	}
	return tok, nil
}
