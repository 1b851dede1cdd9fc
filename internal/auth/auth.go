// Package auth is nsqd's client for an NSQ auth server
// (docs/protocol.md#auth-server):
// it asks an endpoint what a secret may do and answers whether a topic and
// channel are allowed.
package auth

import (
	"fmt"
	"regexp"
	"time"
)

// SecretHeader carries the auth secret of an HTTP publish (nsqd's
// /pub and /mpub with auth enabled, and publishes one node forwards to
// another on behalf of its client).
const SecretHeader = "X-NSQ-Auth-Secret"

// Permissions an authorization can grant.
const (
	PermSubscribe = "subscribe"
	PermPublish   = "publish"
)

// State is an auth server's answer for one secret, valid until Expires.
type State struct {
	TTL            int             `json:"ttl"`
	Identity       string          `json:"identity"`
	IdentityURL    string          `json:"identity_url"`
	Authorizations []Authorization `json:"authorizations"`
	Expires        time.Time       `json:"-"`
}

// Authorization grants permissions on the topics matching Topic and, for
// subscribing, the channels matching one of Channels. The patterns are
// unanchored regular expressions, as in NSQ.
type Authorization struct {
	Topic       string   `json:"topic"`
	Channels    []string `json:"channels"`
	Permissions []string `json:"permissions"`

	// compiled by State.compile
	topic     *regexp.Regexp
	channels  []*regexp.Regexp
	subscribe bool
	publish   bool
}

// compile checks and compiles the reply, as NSQ validates it: a known
// permission each, patterns that compile and a TTL above zero.
func (s *State) compile(now time.Time) error {
	for i := range s.Authorizations {
		a := &s.Authorizations[i]
		for _, p := range a.Permissions {
			switch p {
			case PermSubscribe:
				a.subscribe = true
			case PermPublish:
				a.publish = true
			default:
				return fmt.Errorf("unknown permission %q", p)
			}
		}
		re, err := regexp.Compile(a.Topic)
		if err != nil {
			return fmt.Errorf("unable to compile topic %q: %w", a.Topic, err)
		}
		a.topic = re
		a.channels = make([]*regexp.Regexp, 0, len(a.Channels))
		for _, c := range a.Channels {
			re, err := regexp.Compile(c)
			if err != nil {
				return fmt.Errorf("unable to compile channel %q: %w", c, err)
			}
			a.channels = append(a.channels, re)
		}
	}
	if s.TTL <= 0 {
		return fmt.Errorf("invalid TTL %d (must be >0)", s.TTL)
	}
	s.Expires = now.Add(time.Duration(s.TTL) * time.Second)
	return nil
}

// HasAuthorizations reports whether the secret was granted anything.
func (s *State) HasAuthorizations() bool { return s != nil && len(s.Authorizations) > 0 }

// Expired reports whether the answer is past its TTL at now.
func (s *State) Expired(now time.Time) bool { return s.Expires.Before(now) }

// IsAllowed reports whether any authorization permits the topic and
// channel. An empty channel asks for publishing, which still needs a
// channel pattern matching "" (e.g. ".*"), as in NSQ.
func (s *State) IsAllowed(topic, channel string) bool {
	for i := range s.Authorizations {
		if s.Authorizations[i].isAllowed(topic, channel) {
			return true
		}
	}
	return false
}

// CanSubscribe reports whether any authorization permits subscribing to
// some channel of the topic: reading what the topic holds is no more than
// what such a subscriber gets.
func (s *State) CanSubscribe(topic string) bool {
	for i := range s.Authorizations {
		a := &s.Authorizations[i]
		if a.subscribe && len(a.channels) > 0 && a.topic != nil && a.topic.MatchString(topic) {
			return true
		}
	}
	return false
}

func (a *Authorization) isAllowed(topic, channel string) bool {
	if (channel != "" && !a.subscribe) || (channel == "" && !a.publish) {
		return false
	}
	if a.topic == nil || !a.topic.MatchString(topic) {
		return false
	}
	for _, re := range a.channels {
		if re.MatchString(channel) {
			return true
		}
	}
	return false
}
