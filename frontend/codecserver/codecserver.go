// Package codecserver is the Temporal Web UI's remote codec on serve: POST /codec/decode and
// POST /codec/encode, the UI's codec protocol (a JSON body {"payloads":[…]} of proto-JSON
// payloads, answered in the same shape).
//
// The UI sends the signed-in user's access token (TEMPORAL_CODEC_PASS_ACCESS_TOKEN; the UI
// passes it to an https endpoint only) and the handler verifies it with serve's verifier: the
// identity comes only from the verified token. Decode opens a sealed payload only when its
// envelope's tenant is one the caller administers (jobs:admin of that tenant) and returns
// every other payload exactly as it came, so an answer says nothing the UI did not already
// hold. Encode seals for the caller's own tenant, and only for a jobs:admin caller; anyone
// else is refused (403) rather than handed back clear payloads the UI would then write to
// Temporal.
//
// Browsers reach it cross-origin (the UI is another origin), so CORS answers only the
// configured UI origins; a request from any other origin is refused before anything runs.
//
// It sits under frontend beside the edge and is mounted by cmd/app; it knows payloadcrypt
// and authz only, and calls no Temporal service.
package codecserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	commonpb "go.temporal.io/api/common/v1"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/authz"
)

// Paths served. The UI appends /decode and /encode to its codec endpoint, so the endpoint to
// configure is <serve's base URL>/codec.
const (
	PathPrefix = "/codec/"
	PathDecode = "/codec/decode"
	PathEncode = "/codec/encode"
)

// MaxBodyBytes bounds a request body: the UI decodes a page of history events at a time, and
// one Temporal payload is at most a few MiB.
const MaxBodyBytes = 16 << 20

// Options configure the handler.
type Options struct {
	// Verifier checks the bearer token (serve's). Required.
	Verifier authz.Verifier
	// Codec opens and seals payloads (payloadcrypt.NewCodec over serve's key store). Required.
	Codec *payloadcrypt.Codec
	// AllowOrigins are the browser origins (scheme://host[:port]) of the Web UI that may call
	// the endpoints. Defaults to none: browsers elsewhere are refused.
	AllowOrigins []string
	// ResourceURI is serve's resource URI; 401 challenges name its RFC 9728 metadata.
	ResourceURI string
	// DevOperator (jobgate dev only) lets a request with no token act as an operator who
	// administers every tenant, when it comes from a loopback address to a loopback Host
	// (never a rebound name) with no Origin or an allowed one: the dev Web UI has no sign-in,
	// so it has no token to pass. Never set outside dev.
	DevOperator bool
	// Logger, if set, logs who decoded how many payloads of which tenants (never contents):
	// one debug line per request with its counts of opened, refused, clear and failed payloads.
	Logger *zap.Logger
	// Metrics, if set, is where jobgate_codec_payloads_total is registered (serve's /metrics
	// registry). Defaults to nil: counted, not registered.
	Metrics prometheus.Registerer
}

// Outcomes of jobgate_codec_payloads_total{op,outcome}: what became of each payload.
const (
	OutcomeOpened  = "opened"  // decode: sealed for a tenant the caller administers, opened
	OutcomeRefused = "refused" // decode: sealed for a tenant the caller does not administer, returned sealed; encode: the whole request refused (403)
	OutcomeClear   = "clear"   // decode: not sealed (written before encryption), returned as is
	OutcomeFailed  = "failed"  // decode: sealed for an administered tenant but would not open (a forgotten tenant's key); encode: sealing failed
	OutcomeSealed  = "sealed"  // encode: sealed for the caller's tenant
)

type handler struct {
	o       Options
	metaURL string
	// payloads counts payloads by op (decode, encode) and outcome (the Outcome constants).
	payloads *prometheus.CounterVec
}

// New is the handler of PathDecode and PathEncode (mount it at PathPrefix).
func New(o Options) (http.Handler, error) {
	if o.Verifier == nil || o.Codec == nil {
		return nil, errors.New("codecserver: a verifier and a codec are required")
	}
	for _, s := range o.AllowOrigins {
		if err := checkOrigin(s); err != nil {
			return nil, err
		}
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	h := &handler{o: o, metaURL: authz.ResourceMetadataURL(o.ResourceURI), payloads: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "jobgate", Name: "codec_payloads_total",
		Help: "Payloads the Web UI's codec server was sent, by op (decode, encode) and outcome: opened (sealed for a tenant the caller administers), refused (another tenant's, returned sealed; for encode, the payloads of a refused request), clear (never sealed), failed (would not open or seal), sealed (encode).",
	}, []string{"op", "outcome"})}
	for _, oc := range []string{OutcomeOpened, OutcomeRefused, OutcomeClear, OutcomeFailed} {
		h.payloads.WithLabelValues("decode", oc)
	}
	for _, oc := range []string{OutcomeSealed, OutcomeRefused, OutcomeFailed} {
		h.payloads.WithLabelValues("encode", oc)
	}
	if o.Metrics != nil {
		if err := o.Metrics.Register(h.payloads); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, fmt.Errorf("codecserver: register metrics: %w", err)
			}
			h.payloads = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	return h, nil
}

// checkOrigin accepts an origin as browsers send it: scheme and host, no path.
func checkOrigin(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil {
		return fmt.Errorf("codecserver: CORS origin %q: want scheme://host[:port], e.g. https://temporal.example.com", s)
	}
	return nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	if origin != "" {
		if !slices.Contains(h.o.AllowOrigins, origin) {
			// No CORS headers, and nothing runs: a page elsewhere learns nothing, not even
			// whether its token would have worked.
			httpError(w, http.StatusForbidden, "origin not allowed")
			return
		}
		w.Header().Set("Access-Control-Allow-Origin", origin)
		w.Header().Add("Vary", "Origin")
	}
	if r.Method == http.MethodOptions {
		if origin == "" {
			httpError(w, http.StatusForbidden, "a CORS preflight needs an Origin")
			return
		}
		w.Header().Set("Access-Control-Allow-Methods", "POST")
		// What the UI sends: its JSON, the namespace, and the access token when passed.
		w.Header().Set("Access-Control-Allow-Headers", "Authorization, Authorization-Extras, Content-Type, X-Namespace")
		w.Header().Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	encode := false
	switch r.URL.Path {
	case PathDecode:
	case PathEncode:
		encode = true
	default:
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST, OPTIONS")
		httpError(w, http.StatusMethodNotAllowed, "method not allowed: POST")
		return
	}
	c, ok := h.caller(w, r, origin)
	if !ok {
		return
	}
	ps, err := readPayloads(w, r)
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	if encode {
		h.encode(w, c, ps)
		return
	}
	h.decode(w, c, ps)
}

// caller is who asks: a verified principal, or (dev only) the operator.
type caller struct {
	p        authz.Principal
	operator bool
}

func (c caller) administers(tenant string) bool {
	return c.operator || authz.AdministersTenant(c.p, tenant)
}

// caller verifies the bearer token, answering 401 (with the RFC 9728 challenge) when there is
// none or it does not verify.
func (h *handler) caller(w http.ResponseWriter, r *http.Request, origin string) (caller, bool) {
	token, has := bearer(r)
	if !has && h.o.DevOperator && loopbackRequest(r) {
		return caller{operator: true}, true
	}
	challenge := "Bearer"
	if has {
		cl, err := h.o.Verifier.Verify(r.Context(), token)
		if err == nil {
			return caller{p: cl.Principal}, true
		}
		challenge += ` error="invalid_token",`
	}
	if h.metaURL != "" {
		challenge += fmt.Sprintf(" resource_metadata=%q", h.metaURL)
	}
	w.Header().Set("WWW-Authenticate", strings.TrimSuffix(challenge, ","))
	httpError(w, http.StatusUnauthorized, "a valid bearer token is required")
	return caller{}, false
}

// bearer is the request's bearer token. has is false only with no Authorization header at all:
// a header of another scheme, or an empty token, is a credential that fails to verify (401
// invalid_token), never the dev operator's tokenless request.
func bearer(r *http.Request) (token string, has bool) {
	a := r.Header.Get("Authorization")
	if len(a) < 7 || !strings.EqualFold(a[:7], "bearer ") {
		return "", a != ""
	}
	return strings.TrimSpace(a[7:]), true
}

// loopbackRequest: from a loopback address, to a loopback Host (a DNS-rebound name is not),
// so only this machine's processes, or pages of an allowed origin, reach the dev operator.
func loopbackRequest(r *http.Request) bool {
	if !authz.LoopbackPeer(r.RemoteAddr) {
		return false
	}
	h := r.Host
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	h = strings.Trim(h, "[]")
	return h == "localhost" || h == "127.0.0.1" || h == "::1"
}

// request is the codec protocol's body.
type request struct {
	Payloads []json.RawMessage `json:"payloads"`
}

// readPayloads parses the body; its errors name the field at fault.
func readPayloads(w http.ResponseWriter, r *http.Request) ([]*commonpb.Payload, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		return nil, fmt.Errorf("body: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var req request
	if err := dec.Decode(&req); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, fmt.Errorf("%s: want %s, got a JSON %s", te.Field, te.Type, te.Value)
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return nil, fmt.Errorf("%s: unknown field (the body has only payloads)", strings.Trim(f, `"`))
		}
		return nil, fmt.Errorf("body: want a JSON object {\"payloads\":[…]}: %v", err)
	}
	if dec.More() {
		return nil, errors.New("body: trailing data after the JSON object")
	}
	if req.Payloads == nil {
		return nil, errors.New("payloads: required (an array of payloads, possibly empty)")
	}
	ps := make([]*commonpb.Payload, len(req.Payloads))
	for i, raw := range req.Payloads {
		var p commonpb.Payload
		if err := protojson.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("payloads[%d]: not a payload (metadata and data in base64): %v", i, err)
		}
		ps[i] = &p
	}
	return ps, nil
}

// decode opens what the caller administers and returns the rest untouched. A payload that
// will not open (a forgotten tenant's, a key from another deployment, tampered bytes) is
// returned untouched too: the UI shows it as it is.
func (h *handler) decode(w http.ResponseWriter, c caller, ps []*commonpb.Payload) {
	opened, refused, clear, failed := 0, 0, 0, 0
	out := make([]*commonpb.Payload, len(ps))
	for i, p := range ps {
		out[i] = p
		tenant, sealed := payloadcrypt.SealedTenant(p)
		if !sealed {
			clear++
			continue
		}
		if !c.administers(tenant) {
			refused++
			continue
		}
		d, err := h.o.Codec.Decode([]*commonpb.Payload{p})
		if err != nil {
			failed++
			h.o.Logger.Info("codec server: a payload did not open", zap.String("payload_tenant", tenant), zap.Error(err))
			continue
		}
		out[i] = d[0]
		opened++
	}
	h.count("decode", OutcomeOpened, opened)
	h.count("decode", OutcomeRefused, refused)
	h.count("decode", OutcomeClear, clear)
	h.count("decode", OutcomeFailed, failed)
	h.o.Logger.Debug("codec server: decode", zap.String("tenant", c.p.Tenant), zap.String("sub", c.p.Subject),
		zap.Bool("dev_operator", c.operator), zap.Int("payloads", len(ps)), zap.Int("opened", opened),
		zap.Int("refused", refused), zap.Int("clear", clear), zap.Int("failed", failed))
	writePayloads(w, out)
}

// encode seals for the caller's own tenant, for a jobs:admin caller only: a payload the UI
// encodes goes to Temporal (a signal, a start), so handing it back clear would put the
// tenant's words in history in clear. The dev operator has no tenant to seal for.
func (h *handler) encode(w http.ResponseWriter, c caller, ps []*commonpb.Payload) {
	if c.operator || !authz.AdministersTenant(c.p, c.p.Tenant) {
		if !c.operator {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="insufficient_scope", scope=%q`, string(authz.ScopeAdmin)))
		}
		h.count("encode", OutcomeRefused, len(ps))
		httpError(w, http.StatusForbidden, "encode seals for the caller's own tenant and needs jobs:admin of it (a token; the dev operator has no tenant)")
		return
	}
	out, err := h.o.Codec.ForTenant(c.p.Tenant).Encode(ps)
	if err != nil {
		h.count("encode", OutcomeFailed, len(ps))
		h.o.Logger.Warn("codec server: encode failed", zap.String("tenant", c.p.Tenant), zap.Error(err))
		httpError(w, http.StatusServiceUnavailable, "could not seal the payloads; try again")
		return
	}
	h.count("encode", OutcomeSealed, len(ps))
	writePayloads(w, out)
}

// count adds n payloads of op to outcome.
func (h *handler) count(op, outcome string, n int) {
	if n > 0 {
		h.payloads.WithLabelValues(op, outcome).Add(float64(n))
	}
}

func writePayloads(w http.ResponseWriter, ps []*commonpb.Payload) {
	b, err := protojson.Marshal(&commonpb.Payloads{Payloads: ps})
	if err != nil {
		httpError(w, http.StatusInternalServerError, "could not write the payloads")
		return
	}
	if len(ps) == 0 {
		b = []byte(`{"payloads":[]}`) // protojson omits an empty list; the UI reads the field
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// httpError answers a JSON error, as the UI shows the message it gets.
func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
