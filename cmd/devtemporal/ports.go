package devtemporal

import (
	"fmt"
	"net"
	"runtime"
	"strconv"
)

// freePort returns a port on ip that is free right now. The server binds its ports itself,
// so there is a short window in which another process could take the port; to make that
// unlikely on Linux (which hands out recently freed ports again) the port is left in
// TIME_WAIT by a connection closed from the listening side: bind(:0) then avoids it for
// ~60s, while an explicit bind (SO_REUSEADDR, Go's default) still succeeds.
func freePort(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr := l.Addr().(*net.TCPAddr)
	if runtime.GOOS == "darwin" || runtime.GOOS == "windows" {
		return addr.Port, nil // these allocate ports sequentially
	}
	c, err := net.Dial("tcp", net.JoinHostPort(dialableIP(ip), strconv.Itoa(addr.Port)))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	sc, err := l.Accept()
	if err != nil {
		return 0, err
	}
	_ = sc.Close() // server side closes first, so the TIME_WAIT is on this port
	return addr.Port, nil
}

// checkPortFree reports an explicit port that is taken; otherwise the server would only log
// the bind failure from a background goroutine.
func checkPortFree(ip string, port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("port %d on %s is not available: %w", port, ip, err)
	}
	return l.Close()
}
