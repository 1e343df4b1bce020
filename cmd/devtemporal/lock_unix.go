//go:build unix

package devtemporal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDataDir takes an exclusive flock on DataDir/jobgate.lock: two servers on one SQLite
// database (in this process or another) would fight over the single history shard.
// flock locks belong to the open file, so a second Start in the same process is refused too.
func lockDataDir(dir string) (func() error, error) {
	path := filepath.Join(dir, "jobgate.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is in use by another devtemporal server", dir)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() error {
		// Closing the file drops the lock.
		return f.Close()
	}, nil
}
