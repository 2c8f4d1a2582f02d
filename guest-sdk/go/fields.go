package weir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// maxNesting is the deepest nesting of arrays and objects [ReadFields] accepts: encoding/json's
// limit (its maxNestingDepth). It also bounds the scanner's recursion.
const maxNesting = 10000

// ReadFields reads the members of a JSON object that a transform uses, in one pass over value,
// without building the others: the Go SDK's fast path for a transform that reads a few fields of
// a larger value ([Record.ValueJSON] builds every field with encoding/json's reflection, which
// costs more per record than the rest of a transform).
//
// The whole of value is checked against the JSON grammar (RFC 8259), skipped members included,
// as encoding/json and serde_json check it; like them it does not check that strings are UTF-8
// ([StringField] does, for the fields read), and it refuses arrays and objects nested more than
// 10,000 deep, as encoding/json does. On success raw[i] is the text of the member named
// names[i] as written (a string with its quotes and escapes), or nil when the object has no such
// member; of a name given twice the last counts, as with encoding/json and serde_json. raw must
// be at least as long as names; names are compared after unescaping (`"\u006frigin"` is
// `origin`).
//
// The error says "value is not JSON: ..." (with the byte offset of the problem) or "value is not
// a JSON object"; raw is then unspecified.
func ReadFields(value []byte, names []string, raw [][]byte) error {
	raw = raw[:len(names)]
	clear(raw)
	s := scanner{data: value}
	s.space()
	if s.peek() != '{' {
		if err := s.document(); err != nil {
			return err
		}
		return errors.New("value is not a JSON object")
	}
	s.pos++
	s.space()
	if s.peek() == '}' {
		s.pos++
		return s.end()
	}
	for {
		name, escaped, err := s.name()
		if err != nil {
			return err
		}
		if escaped {
			// Valid JSON, so encoding/json unescapes it; the rare path.
			var unescaped string
			_ = json.Unmarshal(name, &unescaped)
			name = []byte(unescaped)
		}
		s.space()
		start := s.pos
		if err := s.value(1); err != nil {
			return err
		}
		for i, want := range names {
			if string(name) == want {
				raw[i] = value[start:s.pos]
			}
		}
		s.space()
		switch s.peek() {
		case ',':
			s.pos++
			s.space()
		case '}':
			s.pos++
			return s.end()
		default:
			return s.fail("expected `,` or `}` after an object member")
		}
	}
}

// StringField reads the member `name` that [ReadFields] found as a Go string: unescaped, with a
// lone surrogate escape as U+FFFD (as encoding/json does). The error names the field: it is
// missing (raw nil), is not a string (quoting it as written), or is not UTF-8 (serde_json
// requires UTF-8 of a string it reads).
func StringField(name string, raw []byte) (string, error) {
	if raw == nil {
		return "", fmt.Errorf("field `%s` is missing", name)
	}
	if raw[0] != '"' {
		return "", fmt.Errorf("field `%s` is not a string: %s", name, Compact(raw))
	}
	if !utf8.Valid(raw) {
		return "", fmt.Errorf("field `%s` is not UTF-8", name)
	}
	text := raw[1 : len(raw)-1]
	if bytes.IndexByte(text, '\\') < 0 {
		return string(text), nil
	}
	var s string
	_ = json.Unmarshal(raw, &s) // ReadFields checked it
	return s, nil
}

// IntField reads the member `name` that [ReadFields] found as an int64. The error names the
// field: it is missing (raw nil), is not a number (quoting it as written), or is not a whole
// number that fits (as encoding/json and serde refuse `2.5` or `1e3` for an integer).
func IntField(name string, raw []byte) (int64, error) {
	if err := numberField(name, raw); err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("field `%s` is not a whole number that fits 64 bits: %s", name, raw)
	}
	return n, nil
}

// FloatField reads the member `name` that [ReadFields] found as a float64. The error names the
// field: it is missing (raw nil), is not a number (quoting it as written), or is out of range.
func FloatField(name string, raw []byte) (float64, error) {
	if err := numberField(name, raw); err != nil {
		return 0, err
	}
	x, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return 0, fmt.Errorf("field `%s` is out of range: %s", name, raw)
	}
	return x, nil
}

func numberField(name string, raw []byte) error {
	if raw == nil {
		return fmt.Errorf("field `%s` is missing", name)
	}
	if c := raw[0]; c != '-' && (c < '0' || c > '9') {
		return fmt.Errorf("field `%s` is not a number: %s", name, Compact(raw))
	}
	return nil
}

// Compact returns a JSON text that [ReadFields] found without its insignificant whitespace, for
// quoting in an error message (serde_json quotes values compactly too, though it also rewrites
// numbers and escapes).
func Compact(raw []byte) []byte {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

// scanner checks JSON text (RFC 8259) from pos on; its methods leave pos past what they read.
type scanner struct {
	data []byte
	pos  int
}

func (s *scanner) fail(problem string) error {
	if s.pos >= len(s.data) {
		return fmt.Errorf("value is not JSON: %s, at the end (byte %d)", problem, len(s.data))
	}
	c := s.data[s.pos]
	if c < 0x20 || c >= 0x7f { // a control character, or part of a UTF-8 sequence
		return fmt.Errorf("value is not JSON: %s, found byte 0x%02x at byte %d", problem, c, s.pos)
	}
	return fmt.Errorf("value is not JSON: %s, found %q at byte %d", problem, c, s.pos)
}

// peek is the byte at pos, or 0 at the end (which no rule accepts there).
func (s *scanner) peek() byte {
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

func (s *scanner) space() {
	data, i := s.data, s.pos
	for i < len(data) && (data[i] == ' ' || data[i] == '\n' || data[i] == '\t' || data[i] == '\r') {
		i++
	}
	s.pos = i
}

// document reads one value and then only whitespace.
func (s *scanner) document() error {
	if err := s.value(0); err != nil {
		return err
	}
	return s.end()
}

func (s *scanner) end() error {
	s.space()
	if s.pos != len(s.data) {
		return s.fail("expected the end after the value")
	}
	return nil
}

// value reads one value at nesting depth (the number of arrays and objects around it).
func (s *scanner) value(depth int) error {
	s.space()
	switch c := s.peek(); {
	case c == '"':
		_, err := s.string()
		return err
	case c == '{' || c == '[':
		if depth >= maxNesting {
			return s.fail(fmt.Sprintf("arrays and objects nested more than %d deep", maxNesting))
		}
		s.pos++
		if c == '{' {
			return s.object(depth + 1)
		}
		return s.array(depth + 1)
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.fail("expected a value")
}

// name reads an object member's name and its `:`; it returns the name's text without quotes.
func (s *scanner) name() (name []byte, escaped bool, err error) {
	if s.peek() != '"' {
		return nil, false, s.fail("expected a member name")
	}
	start := s.pos
	if escaped, err = s.string(); err != nil {
		return nil, false, err
	}
	name = s.data[start+1 : s.pos-1]
	if escaped {
		name = s.data[start:s.pos]
	}
	s.space()
	if s.peek() != ':' {
		return nil, false, s.fail("expected `:` after a member name")
	}
	s.pos++
	return name, escaped, nil
}

// object reads the members after `{`, and the `}`.
func (s *scanner) object(depth int) error {
	s.space()
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		s.space()
		if _, _, err := s.name(); err != nil {
			return err
		}
		if err := s.value(depth); err != nil {
			return err
		}
		s.space()
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.fail("expected `,` or `}` after an object member")
		}
	}
}

// array reads the elements after `[`, and the `]`.
func (s *scanner) array(depth int) error {
	s.space()
	if s.peek() == ']' {
		s.pos++
		return nil
	}
	for {
		if err := s.value(depth); err != nil {
			return err
		}
		s.space()
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.fail("expected `,` or `]` after an array element")
		}
	}
}

// string reads a string from its opening quote; escaped says whether it has escapes.
func (s *scanner) string() (escaped bool, err error) {
	data, i := s.data, s.pos+1
	for {
		for i < len(data) && !stringSpecial[data[i]] {
			i++
		}
		s.pos = i
		switch {
		case i == len(data):
			return false, s.fail("unterminated string")
		case data[i] == '"':
			s.pos++
			return escaped, nil
		case data[i] != '\\':
			return false, s.fail("control character in a string")
		}
		escaped = true
		s.pos++
		switch s.peek() {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			s.pos++
		case 'u':
			s.pos++
			for range 4 {
				if !isHex(s.peek()) {
					return false, s.fail("expected 4 hex digits after `\\u`")
				}
				s.pos++
			}
		default:
			return false, s.fail("expected an escape after `\\`")
		}
		i = s.pos
	}
}

// stringSpecial marks the bytes that end a run of plain bytes in a string: the quote, the
// backslash and the control characters that JSON requires escaped.
var stringSpecial = func() (special [256]bool) {
	for c := range 0x20 {
		special[c] = true
	}
	special['"'], special['\\'] = true, true
	return special
}()

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() error {
	if s.peek() == '-' {
		s.pos++
	}
	switch c := s.peek(); {
	case c == '0':
		s.pos++
	case c >= '1' && c <= '9':
		s.digits()
	default:
		return s.fail("expected a digit")
	}
	if s.peek() == '.' {
		s.pos++
		if !s.digits() {
			return s.fail("expected a digit after `.`")
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.pos++
		if c := s.peek(); c == '+' || c == '-' {
			s.pos++
		}
		if !s.digits() {
			return s.fail("expected a digit in the exponent")
		}
	}
	return nil
}

// digits reads [0-9]*; it says whether there was one.
func (s *scanner) digits() bool {
	start := s.pos
	for c := s.peek(); c >= '0' && c <= '9'; c = s.peek() {
		s.pos++
	}
	return s.pos > start
}

func (s *scanner) literal(word string) error {
	if len(s.data)-s.pos < len(word) || string(s.data[s.pos:s.pos+len(word)]) != word {
		return s.fail("expected `" + word + "`")
	}
	s.pos += len(word)
	return nil
}
