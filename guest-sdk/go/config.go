package weir

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Config is the operator's configuration: (key, value) string pairs in the order the pipeline
// file lists them. Lookups return the last value given for a key. Errors name the key (and the
// bad value), ready to return from a Factory.
type Config struct {
	entries [][2]string
}

// NewConfig builds a configuration from (key, value) pairs.
func NewConfig(entries ...[2]string) Config { return Config{entries: entries} }

// Get returns the value of key.
func (c Config) Get(key string) (string, bool) {
	for i := len(c.entries) - 1; i >= 0; i-- {
		if c.entries[i][0] == key {
			return c.entries[i][1], true
		}
	}
	return "", false
}

// Require returns the value of key, or an error naming the missing key.
func (c Config) Require(key string) (string, error) {
	if v, ok := c.Get(key); ok {
		return v, nil
	}
	return "", fmt.Errorf("missing required config key `%s`", key)
}

func (c Config) invalid(key, value, problem string) error {
	return fmt.Errorf("config key `%s`: invalid value %s: %s", key, strconv.Quote(value), problem)
}

// Int parses the value of key as a signed 64-bit decimal integer, or returns def when the key
// is absent.
func (c Config) Int(key string, def int64) (int64, error) {
	v, ok := c.Get(key)
	if !ok {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		problem := "invalid digit found in string"
		switch {
		case v == "":
			problem = "cannot parse integer from empty string"
		case errors.Is(err, strconv.ErrRange) && strings.HasPrefix(v, "-"):
			problem = "number too small to fit in target type"
		case errors.Is(err, strconv.ErrRange):
			problem = "number too large to fit in target type"
		}
		return 0, c.invalid(key, v, problem)
	}
	return n, nil
}

// Float parses the value of key as a 64-bit float, or returns def when the key is absent.
func (c Config) Float(key string, def float64) (float64, error) {
	v, ok := c.Get(key)
	if !ok {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || strings.ContainsAny(v, "_xXpP") {
		return 0, c.invalid(key, v, "invalid float literal")
	}
	return f, nil
}

// Bool parses the value of key (exactly `true` or `false`), or returns def when absent.
func (c Config) Bool(key string, def bool) (bool, error) {
	v, ok := c.Get(key)
	if !ok {
		return def, nil
	}
	switch v {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, c.invalid(key, v, "provided string was not `true` or `false`")
}

// AllowOnly fails with an error naming the first key that is not in allowed (and listing the
// allowed keys), so typos in a pipeline file do not go unnoticed.
func (c Config) AllowOnly(allowed ...string) error {
	for _, e := range c.entries {
		found := false
		for _, a := range allowed {
			if e[0] == a {
				found = true
				break
			}
		}
		if !found {
			if len(allowed) == 0 {
				return fmt.Errorf("unknown config key `%s` (this transform takes no configuration)", e[0])
			}
			return fmt.Errorf("unknown config key `%s` (allowed: %s)", e[0], strings.Join(allowed, ", "))
		}
	}
	return nil
}

// Entries returns all (key, value) pairs, in file order.
func (c Config) Entries() [][2]string { return c.entries }

// Map returns the configuration as a map (the last value of a repeated key wins).
func (c Config) Map() map[string]string {
	m := make(map[string]string, len(c.entries))
	for _, e := range c.entries {
		m[e[0]] = e[1]
	}
	return m
}
