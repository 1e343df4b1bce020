package devtemporal

import (
	"context"
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

func newUIServer(ip string, port int, frontendHostPort, namespace string) (*uiServer, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	url := "http://" + net.JoinHostPort(dialableIP(ip), strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	cfg := &uiconfig.Config{
		TemporalGRPCAddress: frontendHostPort,
		Host:                ip,
		Port:                l.Addr().(*net.TCPAddr).Port,
		EnableUI:            true,
		DefaultNamespace:    namespace,
		// Plain http on loopback: the CSRF cookie must not require https.
		CORS:     uiconfig.CORS{AllowOrigins: []string{url}, CookieInsecure: true},
		HideLogs: true,
		// No internet in dev/CI; the UI would otherwise fetch news and release info.
		DisableNewsFetch:   true,
		NotifyOnNewVersion: false,
	}
	handler, err := uiHandler(cfg)
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	return &uiServer{
		url:      url,
		listener: l,
		http:     &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second},
		done:     make(chan struct{}),
	}, nil
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

func (u *uiServer) serve() {
	go func() {
		defer close(u.done)
		_ = u.http.Serve(u.listener) // returns http.ErrServerClosed on stop
	}()
}

func (u *uiServer) stop() error {
	select {
	case <-u.done:
		return nil
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := u.http.Shutdown(ctx)
	// Never served (Start failed early): Shutdown does not close the listener then.
	_ = u.listener.Close()
	if errors.Is(err, context.DeadlineExceeded) {
		err = u.http.Close()
	}
	return err
}
