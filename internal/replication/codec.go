package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// op is what a log entry does.
type op byte

const (
	opCreateTopic op = iota + 1
	opDeleteTopic
	opCreateChannel
	opDeleteChannel
	opPause // a topic's (channel empty) or a channel's
	opPublish
	opFinish
	opRequeue
	opNode   // where a node's daemon is reached (a leader says so on election)
	opPolicy // a queue policy patch of a topic (channel empty) or a channel
	opTouch  // in-flight deadlines moved by TOUCH
	opEmpty  // a topic's backlog (channel empty) or a channel emptied
	// opClaim reserves a name while a create asks every node whether it
	// holds an ordinary topic of it; opRelease ends a claim the create was
	// refused under (or that a new leader found undecided).
	opClaim
	opRelease
	// opPlace creates a topic under its claim in a data group of the
	// meta group's choosing (a new one when group is empty: voters then
	// say its members, the preferred leader first).
	opPlace
	// opGroupLeader records in the meta group that node leads a data
	// group in term, for nodes outside the group to find it.
	opGroupLeader
	// opGroupPrefer makes node a data group's preferred leader: an
	// operator moved its leadership there.
	opGroupPrefer
	// opDrain records that node is draining (paused true) or no longer
	// is, so that no group leader hands it the leadership and no new
	// topic is placed on it.
	opDrain
	// opGroupVoters records a data group's voters (the preferred leader
	// first) as a replica move changes them.
	opGroupVoters
)

// ack names one message of a channel in a FIN, REQ or TOUCH batch; due is
// a REQ's new due time or a TOUCH's new deadline (unix ns), attempts how
// many times the message had been delivered then.
type ack struct {
	seq      uint64
	due      int64
	attempts uint16
}

// entry is one command of the replicated log. Which fields mean something
// depends on op.
type entry struct {
	op       op
	topic    string
	channel  string
	replicas int
	paused   bool
	ts       int64 // publish time (unix ns), the leader's clock
	deferFor int64 // DPUB delay (ns)
	bodies   [][]byte
	acks     []ack
	node     string
	tcp      string
	api      string
	policy   []byte // the patch, as POSTed to /topic/policy or /channel/policy
	// claim is the raft index of the name's claim that a create takes
	// effect under, or that a release ends; 0 in a create written before
	// claims, which takes effect unconditionally.
	claim uint64
	// group and voters: an opPlace's data group (or its members), an
	// opGroupLeader's group; term is an opGroupLeader's Raft term there.
	group  string
	voters []string
	term   uint64
	// placed is, in a data group's create or delete of a topic, the meta
	// group's raft index of the placement it was made for (0: unknown),
	// and in the meta group's delete, the placement it deletes.
	placed uint64
}

// entryVersion is the first byte of every entry, so that the format can
// change without misreading old logs. Version 2 added REQ's and TOUCH's
// attempts, version 3 a create's claim; older entries are still read.
// Version 4 added opPlace, opGroupLeader, opGroupPrefer and opDrain, whose
// entries are written as version 4; the others are still written as version 3, so that a node of
// the previous release reads every log that uses no placement. Version 5
// added opGroupVoters, written as version 5, so that a node that cannot
// move replicas refuses a log that did. Version 6 added the placement a
// topic's create or delete was made for (entry.placed), written only
// in those entries that carry one.
const entryVersion = 6

func (e *entry) encode() []byte {
	size := 32 + len(e.topic) + len(e.channel)
	for _, b := range e.bodies {
		size += len(b) + binary.MaxVarintLen32
	}
	size += len(e.acks) * 2 * binary.MaxVarintLen64
	b := make([]byte, 0, size)
	version := byte(3)
	switch {
	case e.placed != 0 && (e.op == opCreateTopic || e.op == opDeleteTopic):
		version = 6
	case e.op >= opGroupVoters:
		version = 5
	case e.op >= opPlace:
		version = 4
	}
	b = append(b, version, byte(e.op))
	b = appendString(b, e.topic)
	b = appendString(b, e.channel)
	switch e.op {
	case opCreateTopic:
		b = binary.AppendUvarint(b, uint64(e.replicas))
		b = binary.AppendUvarint(b, e.claim)
		if version >= 6 {
			b = binary.AppendUvarint(b, e.placed)
		}
	case opDeleteTopic:
		if version >= 6 {
			b = binary.AppendUvarint(b, e.placed)
		}
	case opRelease:
		b = binary.AppendUvarint(b, e.claim)
	case opPause:
		b = append(b, boolByte(e.paused))
	case opPublish:
		b = binary.AppendVarint(b, e.ts)
		b = binary.AppendVarint(b, e.deferFor)
		b = binary.AppendUvarint(b, uint64(len(e.bodies)))
		for _, body := range e.bodies {
			b = appendBytes(b, body)
		}
	case opFinish, opRequeue, opTouch:
		b = binary.AppendUvarint(b, uint64(len(e.acks)))
		for _, a := range e.acks {
			b = binary.AppendUvarint(b, a.seq)
			if e.op != opFinish {
				b = binary.AppendVarint(b, a.due)
				b = binary.AppendUvarint(b, uint64(a.attempts))
			}
		}
	case opNode:
		b = appendString(b, e.node)
		b = appendString(b, e.tcp)
		b = appendString(b, e.api)
	case opPolicy:
		b = appendString(b, string(e.policy))
	case opPlace:
		b = binary.AppendUvarint(b, uint64(e.replicas))
		b = binary.AppendUvarint(b, e.claim)
		b = appendString(b, e.group)
		b = appendStrings(b, e.voters)
	case opGroupPrefer:
		b = appendString(b, e.group)
		b = appendString(b, e.node)
	case opGroupLeader:
		b = appendString(b, e.group)
		b = binary.AppendUvarint(b, e.term)
		b = appendString(b, e.node)
		b = appendString(b, e.tcp)
		b = appendString(b, e.api)
	case opDrain:
		b = appendString(b, e.node)
		b = append(b, boolByte(e.paused))
	case opGroupVoters:
		b = appendString(b, e.group)
		b = appendStrings(b, e.voters)
	}
	return b
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

var errShort = errors.New("entry truncated")

// decoder reads an entry's fields in order; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes returns the next length-prefixed field, sharing data's memory.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errShort
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.err = errShort
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// decodeEntry parses data; bodies share data's memory, which the caller
// must therefore not reuse.
func decodeEntry(data []byte) (*entry, error) {
	d := &decoder{b: data}
	var err error
	version := d.byte()
	if d.err == nil && (version < 1 || version > entryVersion) {
		return nil, fmt.Errorf("entry version %d not known", version)
	}
	e := &entry{op: op(d.byte())}
	e.topic = string(d.bytes())
	e.channel = string(d.bytes())
	switch e.op {
	case opCreateTopic:
		e.replicas = int(d.uvarint())
		if version >= 3 {
			e.claim = d.uvarint()
		}
		if version >= 6 {
			e.placed = d.uvarint()
		}
	case opDeleteTopic:
		if version >= 6 {
			e.placed = d.uvarint()
		}
	case opRelease:
		e.claim = d.uvarint()
	case opCreateChannel, opDeleteChannel, opEmpty, opClaim:
	case opPause:
		e.paused = d.byte() == 1
	case opPublish:
		e.ts = d.varint()
		e.deferFor = d.varint()
		n := d.uvarint()
		if n > maxBatch || n > uint64(len(d.b)) {
			return nil, fmt.Errorf("publish entry of %d messages", n)
		}
		e.bodies = make([][]byte, n)
		for i := range e.bodies {
			e.bodies[i] = d.bytes()
		}
	case opFinish, opRequeue, opTouch:
		n := d.uvarint()
		if n > uint64(len(d.b)) {
			return nil, fmt.Errorf("ack entry of %d messages", n)
		}
		e.acks = make([]ack, n)
		for i := range e.acks {
			e.acks[i].seq = d.uvarint()
			if e.op != opFinish {
				e.acks[i].due = d.varint()
				if version >= 2 {
					e.acks[i].attempts = uint16(min(d.uvarint(), math.MaxUint16))
				}
			}
		}
	case opNode:
		e.node = string(d.bytes())
		e.tcp = string(d.bytes())
		e.api = string(d.bytes())
	case opPolicy:
		e.policy = d.bytes()
	case opPlace:
		e.replicas = int(d.uvarint())
		e.claim = d.uvarint()
		e.group = string(d.bytes())
		if e.voters, err = d.strings(); err != nil {
			return nil, err
		}
	case opGroupPrefer:
		e.group = string(d.bytes())
		e.node = string(d.bytes())
	case opGroupLeader:
		e.group = string(d.bytes())
		e.term = d.uvarint()
		e.node = string(d.bytes())
		e.tcp = string(d.bytes())
		e.api = string(d.bytes())
	case opDrain:
		e.node = string(d.bytes())
		e.paused = d.byte() == 1
	case opGroupVoters:
		e.group = string(d.bytes())
		if e.voters, err = d.strings(); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("entry op %d not known", e.op)
	}
	if d.err != nil {
		return nil, fmt.Errorf("op %d: %w", e.op, d.err)
	}
	return e, nil
}

// appendStrings appends a count and then each string.
func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

// strings reads what appendStrings wrote.
func (d *decoder) strings() ([]string, error) {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		return nil, fmt.Errorf("a list of %d names", n)
	}
	out := make([]string, n)
	for i := range out {
		out[i] = string(d.bytes())
	}
	return out, nil
}
