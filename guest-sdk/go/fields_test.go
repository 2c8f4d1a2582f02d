package weir

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

var fieldNames = []string{"origin", "carrier", "dep_delay"}

// flightValues are records as the flights pipeline carries them, the seeds of the tests below.
var flightValues = []string{
	`{"year":2013,"month":1,"day":1,"dep_time":517,"sched_dep_time":515,"dep_delay":2,"arr_time":830,"sched_arr_time":819,"arr_delay":11,"carrier":"UA","flight":1545,"tailnum":"N14228","origin":"EWR","dest":"IAH","air_time":227,"distance":1400,"hour":5,"minute":15,"time_hour":"2013-01-01T10:00:00Z"}`,
	`{"air_time": null, "arr_delay": null, "carrier": "AA", "day": 1, "dep_delay": null, "dep_time": null, "dest": "MIA", "distance": 1089.0, "flight": -1.5e+3, "origin": "LGA", "tailnum": "N3\u00c9\\"}`,
	` { "origin" : "JFK" , "nested" : { "a" : [ 1 , { "b" : [ ] } , "x\"y" ] , "c" : { } } , "carrier" : "B6" , "dep_delay" : -0.5E-2 } `,
	`{"origin":"EWR","origin":"JFK","\u0063arrier":"U\ud800A","dep_delay":true,"dep_delay":false}`,
}

// checkAgainstEncodingJSON holds ReadFields to encoding/json on value: the same values are
// JSON, and an object's fields are the raw messages encoding/json finds for the same names.
func checkAgainstEncodingJSON(t *testing.T, value []byte) {
	t.Helper()
	raw := make([][]byte, len(fieldNames))
	err := ReadFields(value, fieldNames, raw)
	if !json.Valid(value) {
		if err == nil || !strings.HasPrefix(err.Error(), "value is not JSON: ") {
			t.Fatalf("%q is not JSON, got %v", value, err)
		}
		return
	}
	if trimmed := bytes.TrimLeft(value, " \t\r\n"); trimmed[0] != '{' {
		if err == nil || err.Error() != "value is not a JSON object" {
			t.Fatalf("%q is not an object, got %v", value, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%q: %v", value, err)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(value, &members); err != nil {
		t.Fatalf("%q: %v", value, err)
	}
	for i, name := range fieldNames {
		want, ok := members[name]
		if !ok && raw[i] != nil || ok && !bytes.Equal(raw[i], want) {
			t.Fatalf("%q: field %s is %q, encoding/json found %q", value, name, raw[i], want)
		}
	}
}

func TestReadFieldsReadsTheLastOfEachNamedMember(t *testing.T) {
	raw := make([][]byte, 3)
	for _, c := range []struct{ value, origin, carrier, depDelay string }{
		{flightValues[0], `"EWR"`, `"UA"`, `2`},
		{flightValues[1], `"LGA"`, `"AA"`, `null`},
		{flightValues[2], `"JFK"`, `"B6"`, `-0.5E-2`},
		{flightValues[3], `"JFK"`, `"U\ud800A"`, `false`},
		{`{}`, ``, ``, ``},
	} {
		if err := ReadFields([]byte(c.value), fieldNames, raw); err != nil {
			t.Fatalf("%s: %v", c.value, err)
		}
		for i, want := range []string{c.origin, c.carrier, c.depDelay} {
			if want == "" && raw[i] != nil || string(raw[i]) != want {
				t.Errorf("%s: %s is %q, want %q", c.value, fieldNames[i], raw[i], want)
			}
		}
		checkAgainstEncodingJSON(t, []byte(c.value))
	}
}

func TestReadFieldsRefusesWhatIsNotJSONAndSaysWhere(t *testing.T) {
	raw := make([][]byte, 3)
	for _, c := range []struct{ value, message string }{
		{``, "value is not JSON: expected a value, at the end (byte 0)"},
		{` `, "value is not JSON: expected a value, at the end (byte 1)"},
		{`{"origin":"EWR","dep_delay":NaN}`, "value is not JSON: expected a value, found 'N' at byte 28"},
		{`{"dep_delay":1-2}`, "value is not JSON: expected `,` or `}` after an object member, found '-' at byte 14"},
		{`{"dep_delay":01}`, "value is not JSON: expected `,` or `}` after an object member, found '1' at byte 14"},
		{`{"a":1,}`, "value is not JSON: expected a member name, found '}' at byte 7"},
		{`{"a":"x` + "\n" + `"}`, `value is not JSON: control character in a string, found byte 0x0a at byte 7`},
		{`{"a":é}`, `value is not JSON: expected a value, found byte 0xc3 at byte 5`},
		{`{"a":"\x"}`, "value is not JSON: expected an escape after `\\`, found 'x' at byte 7"},
		{`{"a":"\u12G4"}`, "value is not JSON: expected 4 hex digits after `\\u`, found 'G' at byte 10"},
		{`{"a":[1 2]}`, "value is not JSON: expected `,` or `]` after an array element, found '2' at byte 8"},
		{`{"a":tru}`, "value is not JSON: expected `true`, found 't' at byte 5"},
		{`{"a":1} x`, "value is not JSON: expected the end after the value, found 'x' at byte 8"},
		{`{"a":1.}`, "value is not JSON: expected a digit after `.`, found '}' at byte 7"},
		{`{"a":1e}`, "value is not JSON: expected a digit in the exponent, found '}' at byte 7"},
		{`{"a" 1}`, "value is not JSON: expected `:` after a member name, found '1' at byte 5"},
		{`{"a":"unterminated`, "value is not JSON: unterminated string, at the end (byte 18)"},
		{`[1] x`, "value is not JSON: expected the end after the value, found 'x' at byte 4"},
		{`[1]`, "value is not a JSON object"},
		{` "EWR" `, "value is not a JSON object"},
		{`null`, "value is not a JSON object"},
	} {
		err := ReadFields([]byte(c.value), fieldNames, raw)
		if err == nil || err.Error() != c.message {
			t.Errorf("%q: got %v, want %s", c.value, err, c.message)
		}
		checkAgainstEncodingJSON(t, []byte(c.value))
	}
}

func TestReadFieldsRefusesNestingAsEncodingJSONDoes(t *testing.T) {
	nest := func(depth int) []byte {
		return []byte(`{"origin":"EWR","x":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`)
	}
	raw := make([][]byte, 3)
	if err := ReadFields(nest(10000), fieldNames, raw); err != nil || string(raw[0]) != `"EWR"` {
		t.Errorf("10000 levels: %v %q", err, raw[0])
	}
	err := ReadFields(nest(10001), fieldNames, raw)
	if err == nil || !strings.Contains(err.Error(), "arrays and objects nested more than 10000 deep, found '[' at byte 10019") {
		t.Errorf("10001 levels: %v", err)
	}
	checkAgainstEncodingJSON(t, nest(10000))
	checkAgainstEncodingJSON(t, nest(10001))
}

// Mutants of real records (bytes changed, dropped, added, cut or repeated) are JSON or not, and
// objects or not, in every way the grammar allows; each must be read as encoding/json reads it.
func TestReadFieldsAgreesWithEncodingJSONOnMutatedRecords(t *testing.T) {
	const alphabet = "{}[]\",: \t\n\\/-+.0123456789eEtrufalsnbu\x00\x1f\x7f\xc3\xa9\xff"
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 50_000; n++ {
		value := []byte(flightValues[rng.IntN(len(flightValues))])
		for range 1 + rng.IntN(3) {
			at := rng.IntN(len(value) + 1)
			switch rng.IntN(5) {
			case 0:
				if at < len(value) {
					value[at] = alphabet[rng.IntN(len(alphabet))]
				}
			case 1:
				if at < len(value) {
					value = append(value[:at], value[at+1:]...)
				}
			case 2:
				value = append(value[:at], append([]byte{alphabet[rng.IntN(len(alphabet))]}, value[at:]...)...)
			case 3:
				value = value[:at]
			case 4:
				end := min(len(value), at+rng.IntN(12))
				value = append(value[:end], append(bytes.Clone(value[at:end]), value[end:]...)...)
			}
		}
		checkAgainstEncodingJSON(t, value)
	}
}

func FuzzReadFields(f *testing.F) {
	for _, v := range flightValues {
		f.Add([]byte(v))
	}
	f.Fuzz(checkAgainstEncodingJSON)
}

func TestStringFieldUnescapesAndNamesTheField(t *testing.T) {
	for _, c := range []struct{ raw, text, problem string }{
		{`"EWR"`, "EWR", ""},
		{`"E\"W\u00e9\n"`, "E\"W\u00e9\n", ""},
		{`"E\ud800A"`, "E\uFFFDA", ""},
		{``, "", "field `origin` is missing"},
		{`1`, "", "field `origin` is not a string: 1"},
		{`{ "a" : "\u0001" }`, "", "field `origin` is not a string: {\"a\":\"\\u0001\"}"},
		{"\"U\xffA\"", "", "field `origin` is not UTF-8"},
	} {
		var raw []byte
		if c.raw != "" {
			raw = []byte(c.raw)
		}
		text, err := StringField("origin", raw)
		if c.problem == "" && (err != nil || text != c.text) || c.problem != "" && (err == nil || err.Error() != c.problem) {
			t.Errorf("%s: got %q, %v", c.raw, text, err)
		}
	}
}

func TestNumberFieldsNameTheField(t *testing.T) {
	for _, c := range []struct {
		raw     string
		n       int64
		x       float64
		problem string // of IntField; FloatField's is the same unless the raw is a number
	}{
		{`-17`, -17, -17, ""},
		{`0`, 0, 0, ""},
		{``, 0, 0, "field `amount` is missing"},
		{`"5"`, 0, 0, "field `amount` is not a number: \"5\""},
		{`null`, 0, 0, "field `amount` is not a number: null"},
		{`[ 1 ]`, 0, 0, "field `amount` is not a number: [1]"},
		{`2.5`, 0, 2.5, "field `amount` is not a whole number that fits 64 bits: 2.5"},
		{`1e3`, 0, 1000, "field `amount` is not a whole number that fits 64 bits: 1e3"},
		{`9223372036854775808`, 0, 9223372036854775808, "field `amount` is not a whole number that fits 64 bits: 9223372036854775808"},
	} {
		var raw []byte
		if c.raw != "" {
			raw = []byte(c.raw)
		}
		n, err := IntField("amount", raw)
		if c.problem == "" && (err != nil || n != c.n) || c.problem != "" && (err == nil || err.Error() != c.problem) {
			t.Errorf("IntField(%s): got %d, %v", c.raw, n, err)
		}
		x, err := FloatField("amount", raw)
		wantErr := c.problem != "" && !strings.Contains(c.problem, "whole")
		if !wantErr && (err != nil || x != c.x) || wantErr && (err == nil || err.Error() != c.problem) {
			t.Errorf("FloatField(%s): got %g, %v", c.raw, x, err)
		}
	}
	if _, err := FloatField("amount", []byte(`1e999`)); err == nil || err.Error() != "field `amount` is out of range: 1e999" {
		t.Errorf("FloatField(1e999): %v", err)
	}
}

func TestValueFieldsNamesTheRecord(t *testing.T) {
	raw := make([][]byte, 1)
	r := Record{Value: []byte(`{"amount": 5}`), Offset: 7}
	if err := r.ValueFields([]string{"amount"}, raw); err != nil || string(raw[0]) != "5" {
		t.Errorf("%q %v", raw[0], err)
	}
	for value, message := range map[string]string{
		"":       "record at offset 7 has a null value, not JSON",
		`[5]`:    "record at offset 7: value is not a JSON object",
		`{"a":}`: "record at offset 7: value is not JSON: expected a value, found '}' at byte 5",
	} {
		r.Value = nil
		if value != "" {
			r.Value = []byte(value)
		}
		err := r.ValueFields([]string{"amount"}, raw)
		var te *TransformError
		if !errors.As(err, &te) || te.Message != message || te.Offset == nil || *te.Offset != 7 {
			t.Errorf("%q: %v", value, err)
		}
	}
}
