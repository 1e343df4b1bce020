package tests

// CPU seconds spent by each side of BenchmarkExportVsCopy: on a shared machine the wall time
// of each side follows the CPU it could get, so the CPU each one needs is the steadier figure.

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// procCPU is a process's user+system CPU from /proc/<pid>/stat, with children it waited for
// when withChildren; ppid is its parent's ID. ok false when it is gone.
func procCPU(pid string, withChildren bool) (cpu time.Duration, ppid string, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, "", false
	}
	// The command name (field 2) is parenthesised and may hold spaces: fields count after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, "", false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return 0, "", false
	}
	n := 0
	last := 13 // utime, stime: fields 14, 15 (f[11], f[12]); cutime, cstime: 16, 17
	if withChildren {
		last = 15
	}
	for _, x := range f[11:last] {
		v, _ := strconv.Atoi(x)
		n += v
	}
	return time.Duration(n) * clockTick, f[1], true
}

// cpuUsed is the CPU used so far by this process (the in-process worker, frontends and
// Temporal server) and by the PostgreSQL server pgPID (0: none) with its backends, live or
// reaped.
func cpuUsed(pgPID int) time.Duration {
	self, _, _ := procCPU("self", false)
	if pgPID == 0 {
		return self
	}
	pg := strconv.Itoa(pgPID)
	total, _, _ := procCPU(pg, true)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		if cpu, ppid, ok := procCPU(e.Name(), false); ok && ppid == pg {
			total += cpu
		}
	}
	return self + total
}
