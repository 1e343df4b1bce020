package devidp

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// The device authorization grant (RFC 8628): pkg/op serves
// /device_authorization and the device_code token grant once the storage
// implements op.DeviceAuthorizationStorage; this file is that storage and
// the page where the user types the code and picks a dev user.

var _ op.DeviceAuthorizationStorage = (*storage)(nil)

type deviceEntry struct {
	userCode string // normalized
	state    op.DeviceAuthorizationState
}

// normalizeUserCode lets a user type "bcdf-ghjk", "BCDFGHJK" or "BCDF GHJK".
func normalizeUserCode(s string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(s) {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func (s *storage) StoreDeviceAuthorization(_ context.Context, clientID, deviceCode, userCode string, expires time.Time, scopes []string) error {
	c, ok := s.client(clientID)
	if !ok {
		return fmt.Errorf("client %w", errNotFound)
	}
	scopes = slices.Clone(scopes)
	if c.allows(oidc.GrantTypeRefreshToken) && !slices.Contains(scopes, oidc.ScopeOfflineAccess) {
		scopes = append(scopes, oidc.ScopeOfflineAccess) // as in CreateAuthRequest
	}
	uc := normalizeUserCode(userCode)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gcDevicesLocked()
	if _, dup := s.userCodes[uc]; dup {
		return op.ErrDuplicateUserCode
	}
	s.devices[deviceCode] = &deviceEntry{userCode: uc, state: op.DeviceAuthorizationState{
		ClientID: clientID, Audience: []string{s.resource}, Scopes: scopes, Expires: expires,
	}}
	s.userCodes[uc] = deviceCode
	return nil
}

// gcDevicesLocked purges expired device codes, so low-entropy user codes do not pile up.
func (s *storage) gcDevicesLocked() {
	now := s.now()
	for dc, e := range s.devices {
		if now.After(e.state.Expires.Add(time.Minute)) {
			delete(s.devices, dc)
			delete(s.userCodes, e.userCode)
		}
	}
}

func (s *storage) GetDeviceAuthorizatonState(ctx context.Context, clientID, deviceCode string) (*op.DeviceAuthorizationState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.devices[deviceCode]
	if !ok || e.state.ClientID != clientID {
		return nil, fmt.Errorf("device code %w", errNotFound)
	}
	st := e.state // a copy: pkg/op appends to Audience
	st.Audience = slices.Clone(st.Audience)
	if st.Done || st.Denied {
		// A device code gives tokens once.
		delete(s.devices, deviceCode)
		delete(s.userCodes, e.userCode)
	}
	return &st, nil
}

// completeDevice approves (subject != "") or denies the device request with
// this user code. It fails for an unknown, expired or already decided code.
func (s *storage) completeDevice(userCode, subject string, deny bool) error {
	if !deny {
		if _, ok := s.users[subject]; !ok {
			return fmt.Errorf("user %w", errNotFound)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.deviceByUserCodeLocked(userCode)
	if !ok || e.state.Done || e.state.Denied {
		return fmt.Errorf("user_code %w", errNotFound)
	}
	if deny {
		e.state.Denied = true
		return nil
	}
	e.state.Done, e.state.Subject, e.state.AuthTime, e.state.AMR = true, subject, s.now(), amrOf(true)
	return nil
}

func (s *storage) deviceByUserCodeLocked(userCode string) (*deviceEntry, bool) {
	dc, ok := s.userCodes[normalizeUserCode(userCode)]
	if !ok {
		return nil, false
	}
	e, ok := s.devices[dc]
	if !ok || s.now().After(e.state.Expires) {
		return nil, false
	}
	return e, true
}

// deviceClient is the open device request of userCode: the client asking (id and name) and
// the jobs:* scopes it asks for.
func (s *storage) deviceClient(userCode string) (id, name string, scopes []string, ok bool) {
	s.mu.Lock()
	e, ok := s.deviceByUserCodeLocked(userCode)
	if !ok || e.state.Done || e.state.Denied {
		s.mu.Unlock()
		return "", "", nil, false
	}
	id = e.state.ClientID
	for _, sc := range e.state.Scopes {
		if strings.HasPrefix(sc, "jobs:") {
			scopes = append(scopes, sc)
		}
	}
	s.mu.Unlock()
	name = id
	if c, found := s.client(id); found && c.name != "" {
		name = c.name
	}
	return id, name, scopes, true
}

type deviceData struct {
	Action, UserCode, ClientID, ClientName, Scopes, CSRF, Error, Done string
	Users                                                             []User
}

func (i *IdP) deviceCSRF(userCode string) string {
	return i.csrfToken("device\x00" + normalizeUserCode(userCode))
}

func (i *IdP) renderDevice(w http.ResponseWriter, status int, d deviceData) {
	d.Action = i.path + "/device"
	if d.UserCode != "" {
		d.CSRF = i.deviceCSRF(d.UserCode)
	}
	d.Users = i.users
	renderPage(w, status, deviceTmpl, d)
}

// devicePage: without user_code, a form to type it (a GET form, no JavaScript);
// with one, the picker for it.
func (i *IdP) devicePage(w http.ResponseWriter, r *http.Request) {
	uc := r.URL.Query().Get("user_code")
	if uc == "" {
		i.renderDevice(w, http.StatusOK, deviceData{})
		return
	}
	cid, name, scopes, ok := i.store.deviceClient(uc)
	if !ok {
		i.renderDevice(w, http.StatusBadRequest, deviceData{Error: "Unknown or expired code (user_code); check it or start again on the device."})
		return
	}
	sc := strings.Join(scopes, " ")
	if sc == "" {
		sc = "all of the chosen user's scopes"
	}
	i.renderDevice(w, http.StatusOK, deviceData{UserCode: uc, ClientID: cid, ClientName: name, Scopes: sc})
}

func (i *IdP) deviceSubmit(w http.ResponseWriter, r *http.Request) {
	uc, ok := postedForm(w, r, "user_code", i.deviceCSRF, "device")
	if !ok {
		return
	}
	if uc == "" {
		// No code, no request to answer: refused as a wrong token is.
		http.Error(w, "csrf: missing or wrong token; reload the device page", http.StatusForbidden)
		return
	}
	deny := r.PostForm.Get("deny") != ""
	if err := i.store.completeDevice(uc, r.PostForm.Get("user"), deny); err != nil {
		i.renderDevice(w, http.StatusBadRequest, deviceData{Error: "user or user_code: " + err.Error()})
		return
	}
	msg := "Signed in. You can close this page and return to your device."
	if deny {
		msg = "Denied. The device will not be signed in."
	}
	i.renderDevice(w, http.StatusOK, deviceData{Done: msg})
}
