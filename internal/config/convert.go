package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

var durationType = reflect.TypeOf(time.Duration(0))

// convert turns a TOML value (string, int64, float64, bool, []any, ...)
// into a value of exactly type t, so go-options assigns it without its own
// coercion (which log.Fatals on errors and reads an integer bool backwards).
//
// Rules, compatible with what NSQ config files contain:
//   - time.Duration: a string for time.ParseDuration ("60s"), or an integer
//     taken as milliseconds (go-options' convention).
//   - integers: an integer in range, an integral float, or a decimal string.
//   - floats: a number or a numeric string.
//   - bool: a bool, "true"/"false"-style string, or an integer (0 = false).
//   - string: a string, or a number/bool printed plainly.
//   - []string: an array of strings, or one comma-separated string.
//   - []float64: an array of numbers, or one comma-separated string.
//
// Other field types are passed through for go-options to handle; translate
// such keys before ResolveMap.
func convert(v any, t reflect.Type) (any, error) {
	if reflect.TypeOf(v) == t {
		return v, nil
	}
	out := reflect.New(t).Elem()
	switch {
	case t == durationType:
		d, err := toDuration(v)
		if err != nil {
			return nil, err
		}
		out.SetInt(int64(d))
	case t.Kind() == reflect.Bool:
		b, err := toBool(v)
		if err != nil {
			return nil, err
		}
		out.SetBool(b)
	case isInt(t.Kind()):
		n, err := toInt(v)
		if err != nil {
			return nil, err
		}
		if out.OverflowInt(n) {
			return nil, fmt.Errorf("%d out of range for %s", n, t)
		}
		out.SetInt(n)
	case isUint(t.Kind()):
		n, err := toInt(v)
		if err != nil {
			return nil, err
		}
		if n < 0 || out.OverflowUint(uint64(n)) {
			return nil, fmt.Errorf("%d out of range for %s", n, t)
		}
		out.SetUint(uint64(n))
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		f, err := toFloat(v)
		if err != nil {
			return nil, err
		}
		out.SetFloat(f)
	case t.Kind() == reflect.String:
		s, err := toString(v)
		if err != nil {
			return nil, err
		}
		out.SetString(s)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		ss, err := toStrings(v)
		if err != nil {
			return nil, err
		}
		out.Set(reflect.MakeSlice(t, len(ss), len(ss)))
		for i, s := range ss {
			out.Index(i).SetString(s)
		}
	case t.Kind() == reflect.Slice && (t.Elem().Kind() == reflect.Float64 || t.Elem().Kind() == reflect.Float32):
		fs, err := toFloats(v)
		if err != nil {
			return nil, err
		}
		out.Set(reflect.MakeSlice(t, len(fs), len(fs)))
		for i, f := range fs {
			out.Index(i).SetFloat(f)
		}
	default:
		return v, nil
	}
	return out.Interface(), nil
}

func isInt(k reflect.Kind) bool {
	return k == reflect.Int || k == reflect.Int8 || k == reflect.Int16 || k == reflect.Int32 || k == reflect.Int64
}

func isUint(k reflect.Kind) bool {
	return k == reflect.Uint || k == reflect.Uint8 || k == reflect.Uint16 || k == reflect.Uint32 || k == reflect.Uint64
}

func toDuration(v any) (time.Duration, error) {
	switch x := v.(type) {
	case string:
		d, err := time.ParseDuration(x)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q (want e.g. \"60s\", or integer milliseconds)", x)
		}
		return d, nil
	case int64:
		return time.Duration(x) * time.Millisecond, nil
	}
	return 0, fmt.Errorf("invalid duration %v (%T); want a string like \"60s\" or integer milliseconds", v, v)
}

func toBool(v any) (bool, error) {
	switch x := v.(type) {
	case bool:
		return x, nil
	case string:
		b, err := strconv.ParseBool(x)
		if err != nil {
			return false, fmt.Errorf("invalid bool %q", x)
		}
		return b, nil
	case int64:
		return x != 0, nil
	}
	return false, fmt.Errorf("invalid bool %v (%T)", v, v)
}

func toInt(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case float64:
		if x != math.Trunc(x) || x < math.MinInt64 || x >= math.MaxInt64 {
			return 0, fmt.Errorf("invalid integer %v", x)
		}
		return int64(x), nil
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("invalid integer %q", x)
		}
		return n, nil
	}
	return 0, fmt.Errorf("invalid integer %v (%T)", v, v)
}

func toFloat(v any) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case int64:
		return float64(x), nil
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return 0, fmt.Errorf("invalid number %q", x)
		}
		return f, nil
	}
	return 0, fmt.Errorf("invalid number %v (%T)", v, v)
}

func toString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case int64, float64, bool:
		return fmt.Sprint(x), nil
	}
	return "", fmt.Errorf("invalid string %v (%T)", v, v)
}

func toStrings(v any) ([]string, error) {
	switch x := v.(type) {
	case string:
		if x == "" {
			return []string{}, nil
		}
		return strings.Split(x, ","), nil
	case []string:
		return x, nil
	case []any:
		out := make([]string, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("element %d: want a string, got %v (%T)", i, e, e)
			}
			out[i] = s
		}
		return out, nil
	}
	return nil, fmt.Errorf("want an array of strings, got %v (%T)", v, v)
}

func toFloats(v any) ([]float64, error) {
	var elems []any
	switch x := v.(type) {
	case string:
		for _, s := range strings.Split(x, ",") {
			elems = append(elems, s)
		}
	case []any:
		elems = x
	default:
		return nil, fmt.Errorf("want an array of numbers, got %v (%T)", v, v)
	}
	out := make([]float64, len(elems))
	for i, e := range elems {
		f, err := toFloat(e)
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
		out[i] = f
	}
	return out, nil
}
