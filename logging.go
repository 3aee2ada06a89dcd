package rocsync

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/syncstate"
)

// LogLevel is how much rocsync logs. The zero value is LogWarn: rocsync is
// quiet while things go as expected, and says when they do not (a library
// missing, an implicit host wait in sync-debug mode).
type LogLevel int8

const (
	// LogWarn logs what may need the user's attention (the default).
	LogWarn LogLevel = iota
	// LogOff logs nothing.
	LogOff
	// LogError logs only errors.
	LogError
	// LogInfo also logs which backend Open chose and why.
	LogInfo
	// LogDebug also logs every sync decision: for each fence an op must
	// follow, whether it was skipped (same queue, or already complete),
	// waited for on the device, or waited for on the host and why, with
	// the op, its queue or stream and the producer's fence; and every
	// host wait made outside the sync core's decisions (read-back,
	// Synchronize, frees, throttling, launch-blocking, staging).
	// It costs a log line per fence; below it, the sync core pays one
	// nil check per fence.
	LogDebug
)

// String names the level as ParseLogLevel and ROCSYNC_LOG take it.
func (l LogLevel) String() string {
	switch l {
	case LogWarn:
		return "warn"
	case LogOff:
		return "off"
	case LogError:
		return "error"
	case LogInfo:
		return "info"
	case LogDebug:
		return "debug"
	}
	return fmt.Sprintf("LogLevel(%d)", int8(l))
}

func (l LogLevel) zerolog() zerolog.Level {
	switch l {
	case LogOff:
		return zerolog.Disabled
	case LogError:
		return zerolog.ErrorLevel
	case LogInfo:
		return zerolog.InfoLevel
	case LogDebug:
		return zerolog.DebugLevel
	}
	return zerolog.WarnLevel
}

// ParseLogLevel parses a level name as String prints it ("off", "error",
// "warn", "info", "debug", in any case), as the ROCSYNC_LOG environment
// variable takes.
func ParseLogLevel(s string) (LogLevel, error) {
	if l, ok := logLevelNamed(s); ok {
		return l, nil
	}
	return 0, newErr("ParseLogLevel", ErrInvalid, "unknown log level %q (%s)", s, logLevelsWanted)
}

const logLevelsWanted = "want off, error, warn, info or debug"

// logLevelNamed is the level s names, in any case and with spaces around
// it ("DEBUG" is log/slog's spelling).
func logLevelNamed(s string) (LogLevel, bool) {
	s = strings.TrimSpace(s)
	for _, l := range []LogLevel{LogOff, LogError, LogWarn, LogInfo, LogDebug} {
		if strings.EqualFold(l.String(), s) {
			return l, true
		}
	}
	return 0, false
}

// logger builds the zerolog logger Open uses, from LogHandler, or
// LogWriter and LogLevel (ROCSYNC_LOG overriding the level).
func logger(o Options) (zerolog.Logger, error) {
	if o.LogHandler != nil {
		return zerolog.New(slogWriter{o.LogHandler}).Level(handlerLevel(o.LogHandler)), nil
	}
	level := o.LogLevel
	if env := os.Getenv("ROCSYNC_LOG"); env != "" {
		l, ok := logLevelNamed(env)
		if !ok {
			return zerolog.Logger{}, newErr("Open", ErrInvalid, "ROCSYNC_LOG=%q is not a log level (%s)", env, logLevelsWanted)
		}
		level = l
	}
	if level > LogDebug || level < LogWarn {
		return zerolog.Logger{}, newErr("Open", ErrInvalid, "unknown LogLevel %d", int8(level))
	}
	w := o.LogWriter
	if w == nil {
		w = os.Stderr
	}
	return zerolog.New(zerolog.ConsoleWriter{Out: w, NoColor: true}).Level(level.zerolog()).With().Timestamp().Logger(), nil
}

// handlerLevel is the lowest level h enables, checked once at Open.
func handlerLevel(h slog.Handler) zerolog.Level {
	ctx := context.Background()
	for _, l := range []struct {
		s slog.Level
		z zerolog.Level
	}{{slog.LevelDebug, zerolog.DebugLevel}, {slog.LevelInfo, zerolog.InfoLevel}, {slog.LevelWarn, zerolog.WarnLevel}, {slog.LevelError, zerolog.ErrorLevel}} {
		if h.Enabled(ctx, l.s) {
			return l.z
		}
	}
	return zerolog.Disabled
}

// slogWriter hands zerolog's events to a slog.Handler: each event's JSON
// becomes a record with its message and its fields as attributes, in name
// order. Only events that pass the level are encoded, so the decoding
// costs nothing when a level is off.
type slogWriter struct{ h slog.Handler }

func (w slogWriter) Write(p []byte) (int, error) { return w.WriteLevel(zerolog.NoLevel, p) }

func (w slogWriter) WriteLevel(l zerolog.Level, p []byte) (int, error) {
	var fields map[string]any
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil {
		return 0, err
	}
	msg, _ := fields[zerolog.MessageFieldName].(string)
	delete(fields, zerolog.MessageFieldName)
	delete(fields, zerolog.LevelFieldName)
	delete(fields, zerolog.TimestampFieldName)
	level := slog.LevelInfo
	switch l {
	case zerolog.TraceLevel, zerolog.DebugLevel:
		level = slog.LevelDebug
	case zerolog.WarnLevel:
		level = slog.LevelWarn
	case zerolog.ErrorLevel, zerolog.FatalLevel, zerolog.PanicLevel:
		level = slog.LevelError
	}
	r := slog.NewRecord(time.Now(), level, msg, 0)
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := fields[k]
		if n, ok := v.(json.Number); ok {
			if i, err := n.Int64(); err == nil {
				v = i
			} else if f, err := n.Float64(); err == nil {
				v = f
			}
		}
		r.AddAttrs(slog.Any(k, v))
	}
	if err := w.h.Handle(context.Background(), r); err != nil {
		return 0, err
	}
	return len(p), nil
}

// decisionLog logs the sync core's decisions at debug level; Open installs
// it as the engine's observer only when the logger enables debug, so the
// hot path does not even make the call otherwise.
type decisionLog struct{ log *zerolog.Logger }

func (l decisionLog) Decided(op string, consumer syncstate.Timeline, f syncstate.Fence, d syncstate.Decision, r syncstate.Reason) {
	e := l.log.Debug()
	if e == nil {
		return
	}
	e = e.Str("op", op).Str("on", consumer.Name()).Str("after", f.TL.Name()).Uint64("ticket", f.Ticket)
	if d == syncstate.HostWait {
		e = e.Stringer("reason", r)
	}
	e.Msg("rocsync: " + d.String())
}

var _ zerolog.LevelWriter = slogWriter{}

// logFallback says, in one line, that Auto uses the emulator because
// neither ROCm nor CUDA worked. Finding no AMD GPU, or no ROCm, with no
// NVIDIA driver or GPU either, is the normal case on such a machine (info;
// the runtimes' own words only at debug level); ROCm or CUDA failing on a
// machine that has it is a warning.
func logFallback(log *zerolog.Logger, rocmErr, cudaErr error) {
	var e *zerolog.Event
	msg := "rocsync: no AMD GPU found, using the emulated AMD device"
	warn := false
	switch {
	case !quietCUDAFailure(cudaErr):
		// NVIDIA's driver is there but did not start: say why at every
		// level, with ROCm's reason beside it.
		e, warn = log.Warn().Err(cudaErr).AnErr("rocm", rocmErr), true
		msg = "rocsync: no AMD GPU found and the CUDA driver failed to start, using the emulated AMD device"
	case errors.Is(rocmErr, driver.ErrNoDevice):
		e = log.Info()
	case errors.Is(rocmErr, driver.ErrNotInstalled):
		e = log.Info()
		msg = "rocsync: ROCm is not installed, using the emulated AMD device"
	default:
		// A warning carries the reason at every level.
		e, warn = log.Warn().Err(rocmErr), true
		msg = "rocsync: ROCm failed to start, using the emulated AMD device"
	}
	if e == nil {
		return
	}
	if !warn && log.GetLevel() <= zerolog.DebugLevel {
		e = e.AnErr("reason", rocmErr).AnErr("cuda", cudaErr)
	}
	e.Str("backend", "emulator").Msg(msg)
}

// quietCUDAFailure reports whether Auto's CUDA attempt failed the
// ordinary way, with no NVIDIA driver or no NVIDIA GPU: not worth a
// warning on a machine that never had one.
func quietCUDAFailure(err error) bool {
	return err == nil || errors.Is(err, driver.ErrNotInstalled) || errors.Is(err, driver.ErrNoDevice)
}

// logCUDAChosen logs Auto's choice of NVIDIA's driver, ROCm's reason at
// debug level.
func logCUDAChosen(log *zerolog.Logger, rocmErr error) {
	e := log.Info().Str("backend", "cuda")
	if log.GetLevel() <= zerolog.DebugLevel {
		e = e.AnErr("rocm", rocmErr)
	}
	e.Msg("rocsync: no AMD GPU found, using the CUDA driver and cuBLAS")
}
