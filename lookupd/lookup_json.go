package lookupd

import (
	"encoding/json"
	"slices"
	"strings"
)

// AppendLookupJSON appends the /lookup answer for topic to dst, byte for
// byte what encoding/json makes of Lookup's result, and reports whether the
// topic exists. It is the HTTP path: each producer's JSON was encoded once
// when it identified, so an answer costs copies, not reflection.
func (db *RegistrationDB) AppendLookupJSON(dst []byte, topic string, f ActiveFilter) ([]byte, bool) {
	db.mu.RLock()
	defer db.mu.RUnlock()
	ps, ok := db.regs[CategoryTopic][topic][""]
	if !ok {
		return dst, false
	}
	dst = append(dst, `{"channels":[`...)
	for i, c := range db.channelsLocked(topic) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, c)
	}
	dst = append(dst, `],"producers":[`...)
	active := make([]*producer, 0, len(ps))
	for _, p := range ps {
		if !f.inactive(p.peer) && !f.tombstoned(p) {
			active = append(active, p)
		}
	}
	slices.SortFunc(active, func(a, b *producer) int { return strings.Compare(a.peer.id, b.peer.id) })
	for i, p := range active {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, p.peer.infoJSON...)
	}
	return append(dst, "]}"...), true
}

// appendJSONString appends s as a JSON string. Valid names need no escaping;
// anything else goes through encoding/json so the output stays identical.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			js, _ := json.Marshal(s)
			return append(dst, js...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
