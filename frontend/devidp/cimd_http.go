package devidp

import (
	"fmt"
	"net/http"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// cimdAuthorize checks a URL client_id at /authorize before pkg/op sees the request, so the
// person gets the reason: pkg/op answers any client it cannot load with "unable to retrieve
// client by id". A refusal is a 400 page and never a redirect (RFC 6749 §4.1.2.1: the
// redirect URI of a client that cannot be verified is not trusted): "invalid_client: <why>"
// when the document cannot be fetched or fails a rule, "invalid_request: redirect_uri: …" when
// the redirect URI is not one the document lists. Other client IDs go straight to pkg/op.
func (i *IdP) cimdAuthorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.FormValue("client_id")
		if !urlClientID(id) {
			next.ServeHTTP(w, r)
			return
		}
		c, err := i.store.cimd.resolve(r.Context(), id)
		if err != nil {
			refuseAuthorize(w, string(oidc.InvalidClient), err.Error())
			return
		}
		if ru := r.FormValue("redirect_uri"); ru != "" {
			if op.ValidateAuthReqRedirectURI(c, ru, oidc.ResponseTypeCode) != nil {
				refuseAuthorize(w, string(oidc.InvalidRequest), fmt.Sprintf(
					"redirect_uri: %q is not one of the redirect_uris in the client's metadata document %s", ru, id))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// refuseAuthorize is the 400 page of a refused authorization request: "<error>: <description>".
func refuseAuthorize(w http.ResponseWriter, code, desc string) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	http.Error(w, code+": "+desc, http.StatusBadRequest)
}
