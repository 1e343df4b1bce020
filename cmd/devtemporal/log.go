package devtemporal

import (
	"context"
	"strings"
	"sync/atomic"

	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// serverLogger adapts a zap logger for the Temporal server:
//   - it forwards WARN and above only (INFO would flood a dev console),
//   - Panic/DPanic/Fatal are logged as errors instead of panicking or exiting, so a
//     misbehaving embedded server cannot kill the host process (as the Temporal CLI does),
//   - after quietShutdown only errors pass (the server warns routinely while stopping).
type serverLogger struct {
	inner    log.Logger
	minLevel *atomic.Int32 // zapcore.Level
}

var _ log.Logger = (*serverLogger)(nil)
var _ log.WithLogger = (*serverLogger)(nil)

func newServerLogger(zl *zap.Logger) *serverLogger {
	min := &atomic.Int32{}
	min.Store(int32(zapcore.WarnLevel))
	if zl == nil {
		return &serverLogger{inner: log.NewNoopLogger(), minLevel: min}
	}
	// Skip(1): the server's "logging-call-at" field must point past this adapter.
	return &serverLogger{inner: log.NewZapLogger(zl).Skip(1), minLevel: min}
}

func (l *serverLogger) on(level zapcore.Level) bool { return int32(level) >= l.minLevel.Load() }

func (l *serverLogger) quietShutdown() { l.minLevel.Store(int32(zapcore.ErrorLevel)) }

// warn is for devtemporal's own messages.
func (l *serverLogger) warn(msg string, err error) {
	if l.on(zapcore.WarnLevel) {
		l.inner.Warn(msg, tag.Error(err))
	}
}

func (l *serverLogger) Debug(msg string, tags ...tag.Tag) {
	if l.on(zapcore.DebugLevel) {
		l.inner.Debug(msg, tags...)
	}
}

func (l *serverLogger) Info(msg string, tags ...tag.Tag) {
	if l.on(zapcore.InfoLevel) {
		l.inner.Info(msg, tags...)
	}
}

func (l *serverLogger) Warn(msg string, tags ...tag.Tag) {
	if l.on(zapcore.WarnLevel) && !isDevNoise(msg, tags) {
		l.inner.Warn(msg, tags...)
	}
}

func (l *serverLogger) Error(msg string, tags ...tag.Tag) {
	if !isDevNoise(msg, tags) {
		l.inner.Error(msg, tags...)
	}
}

func (l *serverLogger) DPanic(msg string, tags ...tag.Tag) { l.inner.Error(msg, tags...) }

func (l *serverLogger) Panic(msg string, tags ...tag.Tag) { l.inner.Error(msg, tags...) }

func (l *serverLogger) Fatal(msg string, tags ...tag.Tag) { l.inner.Error(msg, tags...) }

func (l *serverLogger) With(tags ...tag.Tag) log.Logger {
	return &serverLogger{inner: log.With(l.inner, tags...), minLevel: l.minLevel}
}

// isDevNoise drops messages that are routine in dev: the Web UI always asks for history
// pages of 1000 events (over the server's fixed threshold), and a stopping worker cancels
// its long polls.
func isDevNoise(msg string, tags []tag.Tag) bool {
	switch {
	case msg == "GetHistory page size is larger than threshold":
		return true
	case strings.HasPrefix(msg, "Unable to call matching.Poll"):
		for _, t := range tags {
			zt, ok := t.(tag.ZapTag)
			if !ok {
				continue
			}
			// Canceled arrives as ctx.Err() or as a gRPC Canceled status: match the text.
			if err, ok := zt.Field().Interface.(error); ok && strings.Contains(err.Error(), context.Canceled.Error()) {
				return true
			}
		}
	}
	return false
}
