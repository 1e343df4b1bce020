package frontend

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/mcpbody"
	"github.com/jobgate/jobgate/frontend/telemetry"
)

func (f *Frontend) routes() *telemetry.RouteMux {
	mux := &telemetry.RouteMux{ServeMux: http.NewServeMux()}
	metaURL := authz.ResourceMetadataURL(f.Opts.ResourceURI)

	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return f.server },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true, MaxRequestBodyBytes: jobcore.MaxBodyBytesDefault})
	bearer := invalidTokenChallenge(auth.RequireBearerToken(f.verifyToken, &auth.RequireBearerTokenOptions{ResourceMetadataURL: metaURL}))
	mux.Handle("/mcp", f.Metrics.CountMissingBearer(bearer(f.frontDoor(metaURL, mcpHandler))))
	mux.Handle(PathJobEvents, f.Metrics.CountMissingBearer(bearer(f.serveJobEvents(metaURL))))
	for _, k := range f.Kinds {
		for pattern, h := range k.Routes {
			mux.Handle(pattern, f.Metrics.CountMissingBearer(bearer(h)))
		}
	}

	meta := auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               f.Opts.ResourceURI,
		AuthorizationServers:   f.Opts.AuthorizationServers,
		ScopesSupported:        authz.ScopeStrings(authz.AllScopes()),
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "jobgate",
	})
	mux.Handle("/.well-known/oauth-protected-resource", meta)
	mux.Handle("/.well-known/oauth-protected-resource/mcp", meta)

	if f.Opts.SigningKeys != nil {
		// Public by design: the keys auditors check decision records and manifests with
		// (`jobgate verify --keys-url`); no token, since an auditor may have none.
		jwks := f.Opts.SigningKeys.PublicJWKS()
		mux.HandleFunc("GET "+PathSigningKeys, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/jwk-set+json")
			w.Header().Set("Cache-Control", "public, max-age=300")
			_, _ = w.Write(jwks)
		})
	}

	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", f.readyz)
	return mux
}

// PathSigningKeys serves the signing keys' public half as a JWK set (RFC 7517, OKP/Ed25519 keys
// of RFC 8037): what verifies decision records and export manifests.
const PathSigningKeys = "/.well-known/jobgate-signing-keys"

// readyz answers from a health check at most readyTTL old (readiness), so a flood of probes
// costs Temporal one call a second per replica.
func (f *Frontend) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	if err := f.ready.Get(r.Context()); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "temporal unreachable")
		return
	}
	fmt.Fprintln(w, "ok")
}

// verifyToken adapts authz.Verifier to the go-sdk middleware. A token verified in the last
// tokenCacheTTL (and not past its exp) is served from the cache (see tokenCache). Every failure wraps
// auth.ErrInvalidToken so the middleware answers 401 (not 500) with the challenge.
func (f *Frontend) verifyToken(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	if ti, ok := f.tokens.info(token); ok {
		return ti, nil
	}
	c, err := f.Opts.Verifier.Verify(ctx, token)
	if err != nil {
		f.Metrics.Unauthorized.WithLabelValues(telemetry.UnauthInvalid).Inc()
		return nil, fmt.Errorf("%w: %s", auth.ErrInvalidToken, strings.TrimPrefix(err.Error(), authz.ErrInvalidToken.Error()+": "))
	}
	f.tokens.put(token, c)
	return tokenInfo(c), nil
}

// frontDoor is everything in front of the SDK's handler, on one parse of the body (parseBody),
// which it hands on in the request context to every handler behind (tasks/*, the task answer
// of start_*). It does only what the SDK cannot:
//   - refuse a body the SDK might read otherwise (parseBody's strict rules): 400 before anything runs;
//   - answer 403 with an insufficient_scope challenge when the token has none of the scopes of
//     the tool, or of the tasks/* method, called: an HTTP answer with a WWW-Authenticate
//     header, which a method handler cannot give (the SDK writes the status and headers of
//     every answer it sends);
//   - for tasks/*: answer requests of other protocol versions as the SDK answers a method it
//     does not know (registering tasks/* makes them known to every era), check Mcp-Name
//     against params.taskId (checkTaskName) and mark the request checked (taskGate). A task's
//     error answer goes out with the status the SDK gives it (SEP-2575: -32602 → 400).
//
// The body is authoritative for the tool name; the SDK separately rejects a 2026-07-28
// Mcp-Name header that disagrees with it.
func (f *Frontend) frontDoor(metaURL string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, ok := bufferBody(w, r)
		if !ok {
			return
		}
		p, ok := jobcore.PrincipalFromContext(r.Context())
		if !ok {
			http.Error(w, "no principal", http.StatusUnauthorized)
			return
		}
		pb := mcpbody.Parse(body)
		if pb.Err != nil {
			refuseBody(w, pb.Err)
			return
		}
		for _, name := range pb.ToolNames() {
			a, known := f.actions[name]
			if !known || hiddenAppTool(pb, name) {
				continue // not a tool of ours (or not for this host): the SDK answers "unknown tool"
			}
			need := authz.ActionScopes(a)
			if hasAny(p, need) {
				continue
			}
			f.denyScope(r.Context(), w, metaURL, name, need, p)
			return
		}
		ctx := context.WithValue(r.Context(), mcpbody.ContextKey{}, pb)
		// A tasks/* request the SDK's transport takes (whatever it would refuse — Host,
		// Content-Type, Accept — it refuses first).
		if req, ok := rpcRequestOf(pb); ok && sdkTransportOK(r) {
			if req.method == methodSubscriptionsListen && r.Header.Get(headerProtocolVersion) == jobcore.ProtocolMRTR {
				if ids, asks, bad := listenTaskIDs(req); asks {
					f.serveListen(w, r.WithContext(ctx), req, p, metaURL, ids, bad)
					return
				}
			}
			if action, isTask := taskActions[req.method]; isTask {
				if r.Header.Get(headerProtocolVersion) != jobcore.ProtocolMRTR {
					refuseUnknownMethod(w, r, req)
					return
				}
				if need := authz.ActionScopes(action); !hasAny(p, need) {
					f.denyScope(r.Context(), w, metaURL, req.method, need, p)
					return
				}
				if rerr := checkTaskName(r.Header, req); rerr != nil {
					writeRPC(w, http.StatusBadRequest, req.id, nil, rerr)
					return
				}
				ctx = context.WithValue(ctx, taskGateKey{}, &taskGate{})
			}
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// refuseUnknownMethod answers a tasks/* request of another protocol version as the SDK answers
// a method it does not know (go-sdk v1.8.0 mcp/streamable.go:1479-1490): 404 with a JSON-RPC
// method-not-found from 2026-07-28 on, a plain 400 before.
func refuseUnknownMethod(w http.ResponseWriter, r *http.Request, req *rpcRequest) {
	msg := fmt.Sprintf("JSON RPC not handled: %q unsupported", req.method)
	if r.Header.Get(headerProtocolVersion) >= jobcore.ProtocolMRTR {
		writeRPC(w, http.StatusNotFound, req.id, nil, &rpcError{Code: jsonrpc.CodeMethodNotFound, Message: msg})
		return
	}
	http.Error(w, msg, http.StatusBadRequest)
}

// bufferBody reads the request body (bounded) and puts it back for the next handler, so the
// layers in front of the SDK can look at the JSON-RPC message. On failure it has answered.
func bufferBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, jobcore.MaxBodyBytesDefault))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return nil, false
		}
		http.Error(w, "cannot read request body", http.StatusBadRequest)
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, true
}

// refuseBody answers 400 with a JSON-RPC parse error (id null: a body we do not read has no
// id we could trust) for a body parseBody refused, before the SDK or any tool sees it.
func refuseBody(w http.ResponseWriter, err error) {
	writeRPC(w, http.StatusBadRequest, json.RawMessage("null"), nil, &rpcError{Code: jsonrpc.CodeParseError, Message: "Parse error: " + err.Error()})
}

// denyScope answers 403 with the insufficient_scope challenge naming the first scope that would do.
func (f *Frontend) denyScope(ctx context.Context, w http.ResponseWriter, metaURL, what string, need []authz.Scope, p authz.Principal) {
	w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="insufficient_scope", scope=%q, resource_metadata=%q, error_description=%q`,
		string(need[0]), metaURL, what+" needs one of: "+strings.Join(authz.ScopeStrings(need), " ")))
	f.Metrics.InsufficientScope(what)
	f.Logger(ctx).Info("insufficient scope", zap.String("tool", what), zap.String("tenant", p.Tenant), zap.String("sub", p.Subject))
	http.Error(w, "insufficient scope for "+what, http.StatusForbidden)
}

func hasAny(p authz.Principal, scopes []authz.Scope) bool {
	for _, s := range scopes {
		if p.Has(s) {
			return true
		}
	}
	return false
}

// invalidTokenChallenge adds error="invalid_token" (RFC 6750 §3.1) to the 401 challenge that
// auth.RequireBearerToken writes when a presented bearer token fails: the SDK's challenge carries
// only resource_metadata and has no option for an error code. A request without a bearer token
// keeps the bare challenge, as RFC 6750 §3.1 asks. Handlers behind the middleware get the
// original ResponseWriter.
func invalidTokenChallenge(mw func(http.Handler) http.Handler) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		inner := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if cw, ok := w.(*challengeWriter); ok {
				w = cw.ResponseWriter
			}
			next.ServeHTTP(w, r)
		}))
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fields := strings.Fields(r.Header.Get("Authorization"))
			if len(fields) != 2 || !strings.EqualFold(fields[0], "bearer") {
				inner.ServeHTTP(w, r)
				return
			}
			inner.ServeHTTP(&challengeWriter{ResponseWriter: w}, r)
		})
	}
}

// challengeWriter rewrites the Bearer challenge of a 401 to name error="invalid_token".
type challengeWriter struct {
	http.ResponseWriter
	wrote bool
}

func (c *challengeWriter) WriteHeader(code int) {
	if !c.wrote && code == http.StatusUnauthorized {
		h := c.Header()
		vals := h.Values("WWW-Authenticate")
		h.Del("WWW-Authenticate")
		found := false
		for _, v := range vals {
			if rest, ok := strings.CutPrefix(v, "Bearer"); ok {
				found = true
				if strings.Contains(rest, "error=") {
					h.Add("WWW-Authenticate", v)
					continue
				}
				v = `Bearer error="invalid_token"`
				if rest = strings.TrimSpace(rest); rest != "" {
					v += ", " + rest
				}
			}
			h.Add("WWW-Authenticate", v)
		}
		if !found {
			h.Add("WWW-Authenticate", `Bearer error="invalid_token"`)
		}
	}
	c.wrote = true
	c.ResponseWriter.WriteHeader(code)
}

func (c *challengeWriter) Write(b []byte) (int, error) {
	c.wrote = true
	return c.ResponseWriter.Write(b)
}

func (c *challengeWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// traceMethods is the receiving middleware that gives every MCP request its span, a child of
// the HTTP request's: "tools/call <tool>" for a tool of this server ("tools/call" alone for a
// name it does not serve, which a caller chooses), the method's name otherwise. It records the
// tool and the caller's tenant; the tool's handler adds the job ID and the outcome code
// (spanOutcome). Never the arguments.
func (f *Frontend) traceMethods(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		name := method
		attrs := []attribute.KeyValue{attribute.String("mcp.method.name", method)}
		if ctr, ok := req.(*mcp.CallToolRequest); ok && ctr.Params != nil {
			if _, known := f.actions[ctr.Params.Name]; known {
				name += " " + ctr.Params.Name
				attrs = append(attrs, attribute.String("gen_ai.tool.name", ctr.Params.Name))
			}
		}
		if ex := req.GetExtra(); ex != nil {
			if p, ok := jobcore.PrincipalFrom(ex.TokenInfo); ok {
				attrs = append(attrs, telemetry.AttrTenant.String(p.Tenant))
			}
		}
		ctx, span := f.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		defer span.End()
		res, err := next(ctx, method, req)
		if err != nil {
			span.SetStatus(codes.Error, "JSON-RPC error")
		}
		return res, err
	}
}

// logger is f's logger with ctx's trace and span IDs.

// Bounds of the verified-token cache.
const (
	// tokenCacheTTL is the longest a verified token is served from the cache without being
	// verified again. A token is never served past its own exp. A token the issuer revokes, or
	// whose signing key leaves the JWKS, keeps working for at most this long on a replica that
	// verified it (jobgate has no revocation list: without the cache it works until its exp).
	tokenCacheTTL = 30 * time.Second
	// tokenCacheMax bounds the entries; when full, expired entries go, then everything does.
	tokenCacheMax = 10_000
)

// tokenCache remembers successfully verified bearer tokens by sha256 of the whole token (never
// the token itself), so a repeated token skips JWT parsing and signature checks. An entry is the
// Claims the verifier proved for exactly that token: a different token, even of the same
// principal, has a different key, so one token's principal is never served for another.
// Failures are never cached.
type tokenCache struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[[sha256.Size]byte]tokenEntry
}

type tokenEntry struct {
	claims authz.Claims
	info   *auth.TokenInfo // tokenInfo(claims), built once; shared by every request with the token, never modified
	until  time.Time
}

func newTokenCache(now func() time.Time) *tokenCache {
	return &tokenCache{now: now, m: make(map[[sha256.Size]byte]tokenEntry)}
}

func (c *tokenCache) get(token string) (authz.Claims, bool) {
	e, ok := c.entry(token)
	return e.claims, ok
}

// info is the token info of a cached token (see tokenEntry.info).
func (c *tokenCache) info(token string) (*auth.TokenInfo, bool) {
	e, ok := c.entry(token)
	return e.info, ok
}

func (c *tokenCache) entry(token string) (tokenEntry, bool) {
	k := sha256.Sum256([]byte(token))
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return tokenEntry{}, false
	}
	if !now.Before(e.until) {
		delete(c.m, k)
		return tokenEntry{}, false
	}
	return e, true
}

func (c *tokenCache) put(token string, cl authz.Claims) {
	now := c.now()
	until := now.Add(tokenCacheTTL)
	if cl.Expiry.IsZero() || cl.Expiry.Before(until) {
		until = cl.Expiry
	}
	if !now.Before(until) {
		return
	}
	k := sha256.Sum256([]byte(token))
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= tokenCacheMax {
		for key, e := range c.m {
			if !now.Before(e.until) {
				delete(c.m, key)
			}
		}
		if len(c.m) >= tokenCacheMax {
			clear(c.m)
		}
	}
	c.m[k] = tokenEntry{claims: cl, info: tokenInfo(cl), until: until}
}

// tokenInfo is what the go-sdk's bearer middleware and the tool handlers read of a verified
// token. Nobody modifies a TokenInfo after verification, so a cached one is shared.
func tokenInfo(c authz.Claims) *auth.TokenInfo {
	return &auth.TokenInfo{
		Scopes:     authz.ScopeStrings(c.Principal.Scopes),
		Expiration: c.Expiry,
		UserID:     c.Principal.Tenant + "/" + c.Principal.Subject,
		Extra:      map[string]any{jobcore.PrincipalKey: c.Principal, jobcore.IdentityKey: jobcore.IdentityOf(c)},
	}
}
