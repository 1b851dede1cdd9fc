// Package config loads a daemon's TOML config file and resolves it, with the
// command-line flags, onto its options struct through go-options:
// explicit flag > config file > default (docs/protocol.md#options).
//
// go-options itself accepts any key silently and calls log.Fatal (or panics)
// on a value it cannot coerce. This package checks first, so a typo or a
// wrong type in a config file is a clear error instead.
package config

import (
	"flag"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
	options "github.com/mreiferson/go-options"
)

// Load reads a TOML file into a map of option name → value. An empty path
// gives an empty map (no config file).
func Load(path string) (map[string]any, error) {
	cfg := make(map[string]any)
	if path == "" {
		return cfg, nil
	}
	if _, err := toml.DecodeFile(path, &cfg); err != nil {
		return nil, fmt.Errorf("failed to load config file %s - %w", path, err) // NSQ's text
	}
	return cfg, nil
}

// Resolve loads the config file at path (none if "") and resolves it with fs,
// which must already be parsed, onto opts (a pointer to a struct whose
// fields carry `flag:"name"` and optionally `cfg:"key"` tags).
func Resolve(opts any, fs *flag.FlagSet, path string) error {
	cfg, err := Load(path)
	if err != nil {
		return err
	}
	if err := ResolveMap(opts, fs, cfg); err != nil {
		if path != "" {
			return fmt.Errorf("config file %s: %w", path, err)
		}
		return err
	}
	return nil
}

// ResolveMap is Resolve with an already loaded map, for a caller that must
// translate some keys first. Every key must name an option of opts or a flag
// of fs; each value is converted to its option's type (see convert), and
// cfg is updated in place with the converted values.
func ResolveMap(opts any, fs *flag.FlagSet, cfg map[string]any) error {
	fields, err := optionFields(opts)
	if err != nil {
		return err
	}
	byKey := make(map[string]optionField, len(fields))
	byFlag := make(map[string]optionField, len(fields))
	for _, f := range fields {
		if fs.Lookup(f.flag) == nil {
			return fmt.Errorf("option %s: no flag %q in the flag set", f.name, f.flag)
		}
		byKey[f.key] = f
		byFlag[f.flag] = f
	}
	var unknown []string
	for key, v := range cfg {
		f, ok := byKey[key]
		if !ok {
			flagName := strings.ReplaceAll(key, "_", "-")
			if f, isOption := byFlag[flagName]; isOption {
				// The flag's own name is not its config key (a cfg tag
				// renames it); go-options would ignore the value.
				unknown = append(unknown, fmt.Sprintf("%q (did you mean %q?)", key, f.key))
			} else if fs.Lookup(flagName) == nil {
				unknown = append(unknown, fmt.Sprintf("%q", key))
			}
			// Otherwise a flag that backs no option (config, version,
			// verbose): accepted and unused, as in NSQ.
			continue
		}
		cv, err := convert(v, f.typ)
		if err != nil {
			return fmt.Errorf("option %q: %w", key, err)
		}
		cfg[key] = cv
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("unknown option(s) %s", strings.Join(unknown, ", "))
	}
	options.Resolve(opts, fs, cfg)
	return nil
}

// Lookup returns the value of the option whose config key is key (for a
// daemon's GET /config/:opt).
func Lookup(opts any, key string) (any, bool) {
	fields, err := optionFields(opts)
	if err != nil {
		return nil, false
	}
	for _, f := range fields {
		if f.key == key {
			return f.value.Interface(), true
		}
	}
	return nil, false
}

// optionField is one flag-backed field of an options struct.
type optionField struct {
	name  string // Go field name, for messages
	flag  string // flag tag
	key   string // config key: cfg tag, or flag with - → _
	typ   reflect.Type
	value reflect.Value
}

// optionFields lists the flag-backed fields of *opts, descending into
// embedded structs as go-options does.
func optionFields(opts any) ([]optionField, error) {
	v := reflect.ValueOf(opts)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("options must be a pointer to a struct, got %T", opts)
	}
	var out []optionField
	var walk func(s reflect.Value)
	walk = func(s reflect.Value) {
		t := s.Type()
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			fv := s.Field(i)
			if sf.Anonymous {
				switch {
				case fv.Kind() == reflect.Struct:
					walk(fv)
				case fv.Kind() == reflect.Pointer && !fv.IsNil() && fv.Elem().Kind() == reflect.Struct:
					walk(fv.Elem())
				}
			}
			flagName := sf.Tag.Get("flag")
			if flagName == "" {
				continue
			}
			key := sf.Tag.Get("cfg")
			if key == "" {
				key = strings.ReplaceAll(flagName, "-", "_")
			}
			out = append(out, optionField{name: sf.Name, flag: flagName, key: key, typ: sf.Type, value: fv})
		}
	}
	walk(v.Elem())
	return out, nil
}

// Undocumented returns the config keys of opts that an example config file
// does not mention as "key =" at the start of a line (commented out or
// not). Tests use it so that example files cannot go stale.
func Undocumented(example []byte, opts any) ([]string, error) {
	fields, err := optionFields(opts)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, f := range fields {
		re := regexp.MustCompile(`(?m)^#? ?` + regexp.QuoteMeta(f.key) + ` =`)
		if !re.Match(example) {
			missing = append(missing, f.key)
		}
	}
	return missing, nil
}
