package devtemporal

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uioptions "github.com/temporalio/ui-server/v2/server/server_options"
)

// uiServer serves the Temporal Web UI on a listener we bind ourselves.
//
// ui-server's own Start binds the port itself, exits the process (Logger.Fatal) on a bind
// error and stops without draining; so we take its echo handler and run our own http.Server
// on a listener bound (and thus reserved) up front.
type uiServer struct {
	url      string
	listener net.Listener
	http     *http.Server
	done     chan struct{}
}

// listenUI binds the UI port; the handler is attached by start once the frontend is up.
func listenUI(ip string, port int) (*uiServer, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	return &uiServer{
		url:      "http://" + net.JoinHostPort(dialableIP(ip), strconv.Itoa(l.Addr().(*net.TCPAddr).Port)),
		listener: l,
		done:     make(chan struct{}),
	}, nil
}

// start builds the UI and serves it. Call it only once the frontend answers: ui-server
// dials the frontend when built, and a refused first dial puts its gRPC connection into
// reconnect backoff, failing the UI's API calls for a while.
func (u *uiServer) start(ctx context.Context, ip, frontendHostPort string, o *Options) error {
	namespace, t := o.Namespace, o.TLS
	cfg := &uiconfig.Config{
		TemporalGRPCAddress: frontendHostPort,
		Host:                ip,
		Port:                u.listener.Addr().(*net.TCPAddr).Port,
		EnableUI:            true,
		DefaultNamespace:    namespace,
		// Plain http on loopback: the CSRF cookie must not require https.
		CORS:     uiconfig.CORS{AllowOrigins: []string{u.url}, CookieInsecure: true},
		HideLogs: true,
		// No internet in dev/CI; the UI would otherwise fetch news and release info.
		DisableNewsFetch:   true,
		NotifyOnNewVersion: false,
		Codec:              uiconfig.Codec{Endpoint: o.UICodecEndpoint},
	}
	if o.UIAuth != nil {
		if err := o.UIAuth.configure(ctx, cfg, u.url); err != nil {
			return err
		}
	}
	if t != nil {
		// ui-server reads *Data as base64 PEM.
		b64 := base64.StdEncoding.EncodeToString
		cfg.TLS = uiconfig.TLS{CaData: b64(t.RootCAPEM), ServerName: t.ServerName, EnableHostVerification: true}
		if len(t.ClientCAPEM) > 0 {
			cfg.TLS.CertData, cfg.TLS.KeyData = b64(t.ClientCertPEM), b64(t.ClientKeyPEM)
		}
	}
	handler, err := uiHandler(cfg)
	if err != nil {
		return err
	}
	u.http = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(u.done)
		_ = u.http.Serve(u.listener) // returns http.ErrServerClosed on stop
	}()
	return nil
}

// uiHandler builds ui-server's routes and returns its *echo.Echo as an http.Handler.
func uiHandler(cfg *uiconfig.Config) (h http.Handler, err error) {
	defer func() {
		// NewServer panics on bad config; reflection below may panic after an upgrade.
		if r := recover(); r != nil {
			h, err = nil, fmt.Errorf("build UI server: %v", r)
		}
	}()
	srv := uiserver.NewServer(uioptions.WithConfigProvider(cfg))
	field := exported(reflect.ValueOf(srv).Elem().FieldByName("httpServer"))
	if !field.IsValid() {
		return nil, errors.New("build UI server: ui-server has no httpServer field (upgrade changed it?); disable the UI with UIPort=-1")
	}
	h, ok := field.Interface().(http.Handler)
	if !ok || field.IsNil() {
		return nil, fmt.Errorf("build UI server: httpServer is %s, not an http.Handler; disable the UI with UIPort=-1", field.Type())
	}
	return h, nil
}

func (u *uiServer) stop() error {
	if u.http == nil { // never started
		return u.listener.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := u.http.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = u.http.Close()
	}
	<-u.done
	return err
}
