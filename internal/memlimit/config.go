package memlimit

import (
	"fmt"
	"strings"
)

// Config says how the limits in force derive from the detected ones. Hard
// and Soft are written as nsqd's --mem-hard-limit and --mem-soft-limit take
// them (see ParseSize): a size in bytes or with a unit stays what it says
// whatever the machine does; a percentage follows the detected limit (Hard
// is a percentage of it, Soft of the hard limit in force). Empty means the
// detected limit and 75% of the hard limit.
type Config struct {
	Hard, Soft string
}

// SourceConfig is the Source of limits whose hard limit Config set.
const SourceConfig Source = "flag"

// Resolve returns the limits in force when the detected limits are
// detected. Errors name the setting at fault.
func (c Config) Resolve(detected Limits) (Limits, error) {
	lim := detected
	if c.Hard != "" {
		v, err := ParseSize(c.Hard, detected.Hard)
		if err != nil {
			return Limits{}, fmt.Errorf("hard limit: %w", err)
		}
		lim = newLimits(v, SourceConfig)
	}
	if c.Soft != "" {
		v, err := ParseSize(c.Soft, lim.Hard)
		if err != nil {
			return Limits{}, fmt.Errorf("soft limit: %w", err)
		}
		if v > lim.Hard {
			return Limits{}, fmt.Errorf("soft limit (%d) is above the hard limit (%d)", v, lim.Hard)
		}
		lim.Soft = v
	}
	return lim, nil
}

// Follows reports whether the limits Resolve returns depend on the
// detected limit, so that a change of it matters: the hard limit is
// detected or a percentage of what is.
func (c Config) Follows() bool {
	return c.Hard == "" || strings.HasSuffix(strings.TrimSpace(c.Hard), "%")
}
