package testenv

import (
	"flag"
	"runtime"
	"strconv"
	"testing"
)

// ParallelForWaits raises -test.parallel to short for a -short run, and to full for a full
// one, when the command line does not set -parallel itself (go test -parallel N wins); a value
// at or below GOMAXPROCS (the default) changes nothing. Call it from TestMain, before m.Run.
//
// It is for a package whose parallel tests mostly wait (workflow timers, episode sleeps, a
// shared in-process server's answers) rather than compute: the default, GOMAXPROCS, runs two of
// them at a time on a 2-core machine and leaves the cores idle most of the run. A full run's
// heavy tests spawn processes (servers, browsers, databases) that do use the cores and the
// memory, so it takes fewer at a time than a -short one.
func ParallelForWaits(short, full int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	n := full
	if testing.Short() {
		n = short
	}
	if n <= runtime.GOMAXPROCS(0) {
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
