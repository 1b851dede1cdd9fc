// Package names validates topic and channel names the way NSQ does.
package names

import "strings"

// EphemeralSuffix marks a topic or channel that never touches disk.
const EphemeralSuffix = "#ephemeral"

// MaxLength is the longest valid name, counting the #ephemeral suffix.
const MaxLength = 64

// IsEphemeral reports whether name ends in #ephemeral.
func IsEphemeral(name string) bool {
	return strings.HasSuffix(name, EphemeralSuffix)
}

// Valid reports whether name matches ^[.a-zA-Z0-9_-]+(#ephemeral)?$ and is
// 1..64 bytes long. It is hand-rolled rather than a regexp because it runs on
// every PUB and SUB.
func Valid(name string) bool {
	if len(name) == 0 || len(name) > MaxLength {
		return false
	}
	base := strings.TrimSuffix(name, EphemeralSuffix)
	if len(base) == 0 {
		return false
	}
	for i := 0; i < len(base); i++ {
		c := base[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
