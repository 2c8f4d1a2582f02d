//go:build !wasip1

package main

import (
	"fmt"
	"strings"
	"testing"

	weir "example.invalid/weir/guest-sdk/go"
	"example.invalid/weir/guest-sdk/go/state"
	"example.invalid/weir/guest-sdk/go/weirtest"
)

func flightJSON(origin, carrier, depDelay string) string {
	return fmt.Sprintf(`{"year":2013,"month":1,"day":1,"dep_time":517,"sched_dep_time":515,"dep_delay":%s,"carrier":"%s","flight":1545,"origin":"%s","dest":"IAH","distance":1400}`, depDelay, carrier, origin)
}

func run(h *weirtest.Harness, values ...string) ([]string, *weir.TransformError) {
	records := make([]weir.Record, len(values))
	for i, v := range values {
		records[i] = weir.Record{Value: []byte(v), Offset: int64(i)}
	}
	out, err := h.Process(records...)
	var s []string
	for _, o := range out {
		s = append(s, string(o.Value))
	}
	return s, err
}

func TestRunningStatisticsPerOriginAndCarrier(t *testing.T) {
	weirtest.ResetState()
	h, err := weirtest.New(New)
	if err != nil {
		t.Fatal(err)
	}
	out, terr := run(h,
		flightJSON("EWR", "UA", "null"),
		flightJSON("EWR", "UA", "2"),
		flightJSON("JFK", "AA", "-4"),
		flightJSON("EWR", "UA", "16.0"),
		flightJSON("EWR", "UA", "15"),
	)
	if terr != nil {
		t.Fatal(terr)
	}
	want := []string{
		`{"origin":"EWR","carrier":"UA","flights":1,"departed":0,"delayed":0,"total_dep_delay":0,"max_dep_delay":null,"mean_dep_delay":null}`,
		`{"origin":"JFK","carrier":"AA","flights":1,"departed":1,"delayed":0,"total_dep_delay":-4,"max_dep_delay":-4,"mean_dep_delay":-4.0}`,
		`{"origin":"EWR","carrier":"UA","flights":4,"departed":3,"delayed":1,"total_dep_delay":33,"max_dep_delay":16,"mean_dep_delay":11.0}`,
	}
	for i, idx := range []int{0, 2, 4} {
		if out[idx] != want[i] {
			t.Errorf("output %d:\n got %s\nwant %s", idx, out[idx], want[i])
		}
	}
	if v, _ := state.Get("EWR|UA"); string(v) != `{"flights":4,"departed":3,"delayed":1,"total_dep_delay":33,"max_dep_delay":16}` {
		t.Errorf("state %s", v)
	}
}

func TestThresholdAndConfigErrors(t *testing.T) {
	weirtest.ResetState()
	h, err := weirtest.New(New, "threshold_minutes", "1")
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := run(h, flightJSON("LGA", "DL", "2")); !strings.Contains(out[0], `"delayed":1`) {
		t.Error(out[0])
	}
	if _, err := weirtest.New(New, "threshold", "1"); err == nil || !strings.Contains(err.Error(), "`threshold`") {
		t.Error(err)
	}
	if _, err := weirtest.New(New, "threshold_minutes", "x"); err == nil || !strings.Contains(err.Error(), "`threshold_minutes`") || !strings.Contains(err.Error(), `"x"`) {
		t.Error(err)
	}
}

func TestBadRecordsFailWithTheirOffset(t *testing.T) {
	for _, c := range []struct{ bad, problem string }{
		{"[1]", "not a JSON object"},
		{`{"origin":"EWR"}`, "`carrier` is missing"},
		{`{"origin":1,"carrier":"UA"}`, "`origin` is not a string"},
		{flightJSON("EWR", "UA", "2.5"), "not a whole number"},
		{flightJSON("EWR", "UA", "true"), "not a number or null"},
		{"nope", "not JSON"},
		// Text a lenient parser would take, which is not JSON: the whole value is validated.
		{`{"origin":"EWR","carrier":"UA","dep_delay":NaN}`, "not JSON"},
		{`{"origin":"EWR","carrier":"UA","dep_delay":1-2}`, "not JSON"},
		{"{\"origin\":\"EWR\",\"carrier\":\"U\xffA\"}", "not UTF-8"},
	} {
		weirtest.ResetState()
		h, _ := weirtest.New(New)
		_, err := run(h, flightJSON("EWR", "UA", "1"), c.bad)
		if err == nil || err.Offset == nil || *err.Offset != 1 || !strings.Contains(err.Message, "offset 1") || !strings.Contains(err.Message, c.problem) {
			t.Errorf("%s: %+v", c.bad, err)
			continue
		}
		// A failed batch leaves no state behind.
		if _, ok := state.Get("EWR|UA"); ok {
			t.Errorf("%s: state left behind", c.bad)
		}
	}
}

func TestStoredCountersAreReadAsTheRustPluginReadsThem(t *testing.T) {
	process := func(stored string) ([]string, *weir.TransformError) {
		weirtest.ResetState()
		state.Put("EWR|UA", stored)
		h, _ := weirtest.New(New)
		return run(h, flightJSON("EWR", "UA", "1"))
	}
	// An absent max_dep_delay is null (serde's Option).
	out, err := process(`{"flights":1,"departed":1,"delayed":0,"total_dep_delay":2}`)
	if err != nil || !strings.Contains(out[0], `"flights":2,"departed":2,"delayed":0,"total_dep_delay":3,"max_dep_delay":1,`) {
		t.Errorf("%v %v", out, err)
	}
	for _, stored := range []string{
		`nope`,
		`{"departed":1,"delayed":0,"total_dep_delay":2,"max_dep_delay":2}`,
		`{"flights":"1","departed":1,"delayed":0,"total_dep_delay":2,"max_dep_delay":2}`,
		`{"flights":-1,"departed":1,"delayed":0,"total_dep_delay":2,"max_dep_delay":2}`,
		`{"flights":1,"departed":1,"delayed":0,"total_dep_delay":2.5,"max_dep_delay":2}`,
		`{"flights":1,"departed":1,"delayed":0,"total_dep_delay":2,"max_dep_delay":"2"}`,
	} {
		if _, err := process(stored); err == nil || !strings.Contains(err.Message, `state key "EWR|UA": stored value is not the expected JSON`) {
			t.Errorf("%s: %+v", stored, err)
		}
	}
}

func TestOriginAndCarrierAreWrittenAsJSONStrings(t *testing.T) {
	weirtest.ResetState()
	h, _ := weirtest.New(New)
	out, err := run(h, flightJSON(`E\"W<\u00e9\n`, "UA", "1"))
	if err != nil || !strings.HasPrefix(out[0], `{"origin":"E\"W<é\n","carrier":"UA","flights":1,`) {
		t.Errorf("%v %v", out, err)
	}
}

// The fields are read as serde_json (the Rust plugin) and encoding/json (this port's first
// reader) read them: bytes that are not UTF-8 outside them do not matter, the last of a name
// given twice counts, a lone surrogate escape is U+FFFD, and messages quote values as written.
func TestFieldsAreReadAsEncodingJSONReadThem(t *testing.T) {
	accepted := []struct{ value, output string }{
		{`{"x":"` + "\xff" + `","origin":"EWR","carrier":"UA","dep_delay":1}`, `{"origin":"EWR","carrier":"UA","flights":1,`},
		{`{"origin":"EWR","origin":"JFK","carrier":"UA","dep_delay":1}`, `{"origin":"JFK","carrier":"UA","flights":1,`},
		{`{"origin":"EWR","carrier":"UA","dep_delay":"x","dep_delay":3}`, `"max_dep_delay":3,`},
		{`{"origin":"E\ud800\u0041","carrier":"U\\A","dep_delay":1}`, `{"origin":"E` + "\uFFFD" + `A","carrier":"U\\A",`},
	}
	for _, c := range accepted {
		weirtest.ResetState()
		h, _ := weirtest.New(New)
		out, err := run(h, c.value)
		if err != nil || !strings.Contains(out[0], c.output) {
			t.Errorf("%s: %v %v", c.value, out, err)
		}
	}
	refused := []struct{ value, problem string }{
		{`{"origin":"EWR","carrier":"UA","dep_delay":1,"dep_delay":"x"}`, `not a number or null: "x"`},
		{`{"origin":"EWR","carrier":"UA","dep_delay":"a\u0001\u00e9"}`, `not a number or null: "a\u0001\u00e9"`},
		{`{"origin":{"a":"\u0001"},"carrier":"UA"}`, "field `origin` is not a string: {\"a\":\"\\u0001\"}"},
	}
	for _, c := range refused {
		weirtest.ResetState()
		h, _ := weirtest.New(New)
		if _, err := run(h, c.value); err == nil || !strings.Contains(err.Message, c.problem) {
			t.Errorf("%s: %+v", c.value, err)
		}
	}
}
