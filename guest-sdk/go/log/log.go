// Package log writes into the host's structured log, tagged with the operator's name.
//
// The host rate-limits each operator instance; lines over the limit are dropped and counted.
// Messages are fmt.Sprintf formats. Writing to os.Stdout or os.Stderr works too: the host logs
// the guest's stdout and stderr line by line. Natively (not GOOS=wasip1) lines go to stderr.
package log

import (
	"fmt"

	"example.invalid/weir/guest-sdk/go/internal/abi"
)

// Level is the severity of a log line.
type Level uint8

// Levels, in increasing severity.
const (
	LevelTrace Level = iota
	LevelDebug
	LevelInfo
	LevelWarn
	LevelError
)

// Log writes one line at level.
func Log(level Level, message string) {
	if level > LevelError {
		level = LevelError
	}
	abi.Log(abi.Level(level), message)
}

func logf(level Level, format string, args []any) {
	if len(args) == 0 {
		Log(level, format)
		return
	}
	Log(level, fmt.Sprintf(format, args...))
}

// Trace writes one line at trace level.
func Trace(format string, args ...any) { logf(LevelTrace, format, args) }

// Debug writes one line at debug level.
func Debug(format string, args ...any) { logf(LevelDebug, format, args) }

// Info writes one line at info level.
func Info(format string, args ...any) { logf(LevelInfo, format, args) }

// Warn writes one line at warn level.
func Warn(format string, args ...any) { logf(LevelWarn, format, args) }

// Error writes one line at error level.
func Error(format string, args ...any) { logf(LevelError, format, args) }
