// Package app wires jobgate's commands. Each command is a Main struct with Run(ctx) and
// Close(), so end-to-end tests start the real wiring on :0 in-process.
package app

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/jobgate/jobgate/workflows"
)

// TemporalConfig says where Temporal is.
type TemporalConfig struct {
	// Address of the Temporal frontend. Defaults to 127.0.0.1:7233.
	Address string
	// Namespace of the jobs. Defaults to "default".
	Namespace string
	// TaskQueue workers poll. Defaults to "jobgate".
	TaskQueue string
}

// Flags registers the Temporal flags with env-var equivalents.
func (c *TemporalConfig) Flags(fs *flag.FlagSet) {
	strFlag(fs, &c.Address, "temporal-address", "127.0.0.1:7233", "Temporal frontend host:port")
	strFlag(fs, &c.Namespace, "namespace", "default", "Temporal namespace holding the jobs")
	strFlag(fs, &c.TaskQueue, "task-queue", workflows.TaskQueueDefault, "task queue the workers poll")
}

func (c TemporalConfig) options(log *zap.Logger) client.Options {
	return client.Options{HostPort: c.Address, Namespace: c.Namespace, Logger: sdkLogger{log.Sugar()}}
}

// envName maps a flag to its environment variable: temporal-address → JOBGATE_TEMPORAL_ADDRESS.
func envName(flagName string) string {
	return "JOBGATE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func strFlag(fs *flag.FlagSet, p *string, name, def, usage string) {
	if v, ok := os.LookupEnv(envName(name)); ok {
		def = v
	}
	fs.StringVar(p, name, def, usage+" (env "+envName(name)+")")
}

func durFlag(fs *flag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	if v, ok := os.LookupEnv(envName(name)); ok {
		if d, err := time.ParseDuration(v); err == nil {
			def = d
		}
	}
	fs.DurationVar(p, name, def, usage+" (env "+envName(name)+")")
}

func intFlag(fs *flag.FlagSet, p *int, name string, def int, usage string) {
	if v, ok := os.LookupEnv(envName(name)); ok {
		if n, err := strconv.Atoi(v); err == nil {
			def = n
		}
	}
	fs.IntVar(p, name, def, usage+" (env "+envName(name)+")")
}

func boolFlag(fs *flag.FlagSet, p *bool, name string, def bool, usage string) {
	if v, ok := os.LookupEnv(envName(name)); ok {
		if b, err := strconv.ParseBool(v); err == nil {
			def = b
		}
	}
	fs.BoolVar(p, name, def, usage+" (env "+envName(name)+")")
}

// NewLogger builds the process logger: JSON for serve/worker, console for dev.
func NewLogger(format string, level zapcore.Level) (*zap.Logger, error) {
	var cfg zap.Config
	switch format {
	case "json":
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.TimeKey = "ts"
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	case "console":
		cfg = zap.NewDevelopmentConfig()
		cfg.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
		cfg.DisableStacktrace = true
	default:
		return nil, fmt.Errorf("log format %q: want json or console", format)
	}
	cfg.Level = zap.NewAtomicLevelAt(level)
	cfg.DisableCaller = format == "console"
	return cfg.Build()
}

// sdkLogger adapts zap to the Temporal SDK's key-value logger.
type sdkLogger struct{ s *zap.SugaredLogger }

func (l sdkLogger) Debug(msg string, kv ...any) { l.s.Debugw(msg, kv...) }
func (l sdkLogger) Info(msg string, kv ...any)  { l.s.Debugw(msg, kv...) } // SDK info is chatty
func (l sdkLogger) Warn(msg string, kv ...any)  { l.s.Warnw(msg, kv...) }
func (l sdkLogger) Error(msg string, kv ...any) { l.s.Errorw(msg, kv...) }

var _ sdklog.Logger = sdkLogger{}

// waitTemporal dials until Temporal answers or ctx ends, so a worker started alongside a
// booting server does not die on the first refusal.
func waitTemporal(ctx context.Context, opts client.Options) (client.Client, error) {
	var last error
	for {
		c, err := client.DialContext(ctx, opts)
		if err == nil {
			return c, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("temporal at %s: %w", opts.HostPort, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
