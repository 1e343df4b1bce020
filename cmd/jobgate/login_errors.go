package main

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/oauth2"
)

// idpError turns an OAuth error from the identity provider into one line saying what to do.
func idpError(step, clientID string, err error) error {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		return fmt.Errorf("login: %s: %w", step, flatErr(err))
	}
	desc := ""
	if re.ErrorDescription != "" {
		desc = " (" + cleanText(re.ErrorDescription) + ")"
	}
	switch re.ErrorCode {
	case "access_denied":
		return fmt.Errorf("login: sign-in was denied at the identity provider%s; nothing was stored", desc)
	case "expired_token":
		return errors.New("login: the device code expired before it was approved; run 'jobgate login' again")
	case "invalid_client", "unauthorized_client":
		return fmt.Errorf("login: the identity provider refused client %q: %s%s; check --client-id and --client-secret-file", clientID, re.ErrorCode, desc)
	case "invalid_scope":
		return fmt.Errorf("login: the identity provider refused the scopes: invalid_scope%s; pass --scope", desc)
	case "invalid_target":
		return fmt.Errorf("login: the identity provider refused the resource: invalid_target%s; check --resource", desc)
	case "":
		status := ""
		if re.Response != nil {
			status = re.Response.Status
		}
		return fmt.Errorf("login: %s: the identity provider answered %s", step, strings.TrimSpace(status+" "+cleanText(string(re.Body))))
	}
	return fmt.Errorf("login: %s: the identity provider answered %s%s", step, re.ErrorCode, desc)
}

// flatErr flattens an error's text: messages of this command are one line each.
func flatErr(err error) error {
	if err == nil {
		return nil
	}
	return errors.New(cleanText(err.Error()))
}

// cleanText makes untrusted text (an IdP's error_description) one short printable line.
func cleanText(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}
