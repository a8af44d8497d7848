package logging

import (
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New builds the process logger. format "json" writes the fields Cloud
// Logging reads from a container's stdout (severity, message, time,
// logging.googleapis.com/sourceLocation, and the pipeline as one of
// logging.googleapis.com/labels), durations with their unit ("1m30s"); format
// "console" is for a terminal. Repeated lines are sampled (the first 100 of
// a message each second, then one in 100), so a long outage cannot flood
// the logs with one retry line per message.
func New(level, format string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	if w == nil {
		w = os.Stderr
	}
	var enc zapcore.Encoder
	switch format {
	case "json", "":
		ec := zap.NewProductionEncoderConfig()
		ec.MessageKey = "message"
		ec.LevelKey = "severity"
		ec.TimeKey = "time"
		ec.EncodeLevel = cloudSeverity
		ec.EncodeTime = zapcore.RFC3339NanoTimeEncoder
		// Durations as "1m30s", so that the unit is in the value.
		ec.EncodeDuration = zapcore.StringDurationEncoder
		// The caller goes into logging.googleapis.com/sourceLocation
		// (cloudCore), not a field of its own.
		ec.CallerKey = zapcore.OmitKey
		enc = zapcore.NewJSONEncoder(ec)
	case "console":
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, fmt.Errorf("log.format: unknown format %q (json or console)", format)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)
	if format != "console" {
		core = &cloudCore{Core: core}
	}
	core = zapcore.NewSamplerWithOptions(core, time.Second, 100, 100)
	return zap.New(core, zap.AddCaller()), nil
}

// cloudSeverity writes zap levels as Cloud Logging severities.
func cloudSeverity(l zapcore.Level, enc zapcore.PrimitiveArrayEncoder) {
	enc.AppendString(severity(l))
}

// severity is Cloud Logging's name of a zap level.
func severity(l zapcore.Level) string {
	switch l {
	case zapcore.DebugLevel:
		return "DEBUG"
	case zapcore.InfoLevel:
		return "INFO"
	case zapcore.WarnLevel:
		return "WARNING"
	case zapcore.ErrorLevel:
		return "ERROR"
	case zapcore.DPanicLevel, zapcore.PanicLevel:
		return "CRITICAL"
	default:
		return "EMERGENCY"
	}
}
