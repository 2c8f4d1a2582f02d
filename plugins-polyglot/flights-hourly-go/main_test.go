//go:build !wasip1

package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	weir "example.invalid/weir/guest-sdk/go"
	"example.invalid/weir/guest-sdk/go/weirtest"
)

const t0 = 1_357_034_400_000 // 2013-01-01T10:00:00Z

// flight is a record of a flight from origin with dep_delay delay ("null" when it did not
// depart) in the hour hourMs, seen at watermark wm (none when omitted).
func flight(origin, delay string, hourMs int64, wm ...int64) weir.Record {
	r := weir.Record{
		Key:       []byte(origin),
		Value:     fmt.Appendf(nil, `{"origin":%q,"dep_delay":%s}`, origin, delay),
		EventTime: hourMs,
	}
	if len(wm) > 0 {
		r.Watermark = &wm[0]
	}
	return r
}

func harness(t *testing.T, config ...string) *weirtest.Harness {
	t.Helper()
	weirtest.ResetState()
	h, err := weirtest.New(New, config...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestOneMeanPerOriginAndHourOnceTheHourIsOver(t *testing.T) {
	h := harness(t)
	out, err := h.Process(
		flight("EWR", "2", t0),
		flight("EWR", "4", t0+60_000, t0-1),
		flight("EWR", "null", t0, t0+59_999),
		flight("JFK", "-3", t0, t0+59_999),
		flight("EWR", "10", t0+hourMs, t0+59_999),
	)
	if err != nil || len(out) != 0 {
		t.Fatalf("outputs before the hour is over: %v, %v", out, err)
	}
	out, err = h.AdvanceWatermark(t0 + hourMs - 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range out {
		got = append(got, fmt.Sprintf("%s %d %s", o.Key, *o.Timestamp, o.Value))
	}
	want := []string{
		`EWR 1357037999999 {"origin":"EWR","hour":"2013-01-01T10:00:00Z","window_start_ms":1357034400000,"flights":3,"departed":2,"total_dep_delay":6,"mean_dep_delay":3.0}`,
		`JFK 1357037999999 {"origin":"JFK","hour":"2013-01-01T10:00:00Z","window_start_ms":1357034400000,"flights":1,"departed":1,"total_dep_delay":-3,"mean_dep_delay":-3.0}`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if s := rfc3339(-1000); s != "1969-12-31T23:59:59Z" {
		t.Fatalf("rfc3339(-1000) = %s", s)
	}
}

func TestLateFlightsAreCountedOrGoToTheLateOutput(t *testing.T) {
	h := harness(t, "allowed_lateness_ms", "1000", "late_output", "late")
	out, err := h.Process(flight("EWR", "1", t0), flight("EWR", "5", t0, t0+hourMs-1+999), flight("LGA", "7", t0, t0+hourMs-1+1000))
	if err != nil || len(out) != 1 || string(out[0].Key) != "LGA" || *out[0].Sink != "late" {
		t.Fatalf("outputs %v, %v", out, err)
	}
	out, _ = h.AdvanceWatermark(t0 + hourMs + 999)
	var closed Summary
	if len(out) != 1 || json.Unmarshal(out[0].Value, &closed) != nil || closed.Flights != 2 {
		t.Fatalf("closed %v", out)
	}
	h = harness(t)
	if _, err := h.Process(flight("EWR", "1", t0, t0+hourMs)); err != nil {
		t.Fatal(err)
	}
	if n := h.Transform.(*FlightsHourly).hours.LateCount(); n != 1 {
		t.Fatalf("late count %d", n)
	}
}

func TestBadRecordsAndConfig(t *testing.T) {
	h := harness(t)
	_, err := h.Process(weir.Record{Value: []byte(`{"dep_delay":1}`), Offset: 4})
	if err == nil || err.Message != "record at offset 4: field `origin` is missing or not a string" || *err.Offset != 4 {
		t.Fatalf("error %v", err)
	}
	_, err = h.Process(weir.Record{Value: []byte(`{"origin":"EWR","dep_delay":1.5}`), Offset: 5})
	if err == nil || err.Message != "record at offset 5: `dep_delay` is not a whole number: 1.5" {
		t.Fatalf("error %v", err)
	}
	if _, err := weirtest.New(New, "allowed_lateness_ms", "x"); err == nil || !strings.Contains(err.Error(), "config key `allowed_lateness_ms`: invalid value \"x\"") {
		t.Fatalf("error %v", err)
	}
	if _, err := weirtest.New(New, "hours", "1"); err == nil || !strings.Contains(err.Error(), "unknown config key `hours`") {
		t.Fatalf("error %v", err)
	}
}
