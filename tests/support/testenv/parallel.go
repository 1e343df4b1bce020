package testenv

import (
	"flag"
	"runtime"
	"strconv"
	"testing"
)

// ParallelForWaits raises -test.parallel to n for a -short run when the command line does not
// set -parallel itself (go test -parallel N wins). Call it from TestMain, before m.Run.
//
// It is for a package whose parallel tests mostly wait (workflow timers, episode sleeps, a
// shared in-process server's answers) rather than compute: the default, GOMAXPROCS, runs two of
// them at a time on a 2-core machine and leaves the cores idle most of the run. The full run
// keeps the default, because its heavy tests spawn processes (servers, browsers, databases) that
// do use the cores and the memory.
func ParallelForWaits(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	if !testing.Short() || n <= runtime.GOMAXPROCS(0) {
		return
	}
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			panic(err) // the testing package always defines it
		}
	}
}
