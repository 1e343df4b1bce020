//go:build !unix

package devtemporal

import (
	"fmt"
	"sync"
)

// Without flock only servers in this process are kept off a shared DataDir.
var lockedDirs sync.Map

func lockDataDir(dir string) (func() error, error) {
	if _, busy := lockedDirs.LoadOrStore(dir, struct{}{}); busy {
		return nil, fmt.Errorf("%s is in use by another devtemporal server", dir)
	}
	return func() error { lockedDirs.Delete(dir); return nil }, nil
}
