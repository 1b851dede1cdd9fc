package memlimit

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// sizeUnits maps a lower-cased unit to its multiplier.
//
// Suffixes ending in "B" after a letter are decimal (SI): KB = 1000,
// MB = 1000², GB = 1000³, TB = 1000⁴. Binary units are the IEC ones
// (KiB, MiB, GiB, TiB, or Ki, Mi, Gi, Ti as in Kubernetes) and the bare
// letters K, M, G, T, which mean 1024-based as they do for docker --memory,
// systemd MemoryMax= and the JVM's -Xmx. A bare number or "B" is bytes.
// Units are case-insensitive.
var sizeUnits = map[string]uint64{
	"": 1, "b": 1,
	"k": 1 << 10, "ki": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mi": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gi": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "ti": 1 << 40, "tib": 1 << 40, "tb": 1e12,
}

// ParseSize parses a --mem-soft-limit / --mem-hard-limit value: bytes
// ("268435456"), a number with a unit ("256MB", "1GiB", "512M", "1.5G"; see
// sizeUnits for which units are decimal and which binary), or a percentage
// of base ("75%", at most 100%). A space between number and unit is allowed.
// Fractional results are rounded down to whole bytes.
func ParseSize(s string, base uint64) (uint64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("memlimit: bad size %q: want a number such as 512MiB or 75%%", s)
	}

	if unit == "%" {
		pct, err := strconv.ParseFloat(num, 64)
		if err != nil || pct > 100 {
			return 0, fmt.Errorf("memlimit: bad size %q: percentage must be between 0%% and 100%%", s)
		}
		if base == 0 {
			return 0, fmt.Errorf("memlimit: bad size %q: no detected limit to take a percentage of", s)
		}
		return uint64(float64(base) * pct / 100), nil
	}

	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("memlimit: bad size %q: unknown unit %q", s, t[i:])
	}
	// Whole numbers stay in integers so large byte counts are exact.
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseUint(num, 10, 64)
		hi, v := bits.Mul64(n, mult)
		if err != nil || hi != 0 {
			return 0, fmt.Errorf("memlimit: bad size %q: too large", s)
		}
		return v, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("memlimit: bad size %q: malformed number", s)
	}
	v := f * float64(mult)
	if v >= math.Ldexp(1, 64) {
		return 0, fmt.Errorf("memlimit: bad size %q: too large", s)
	}
	return uint64(v), nil
}
