package replication

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"

	"github.com/hashicorp/raft"
)

// A snapshot is written as a stream, so that neither taking nor restoring
// one holds the bodies in memory:
//
//	version byte (5)
//	nodes:  count, then (cluster address, tcp, http)
//	topics: count, then each topic:
//	  name, replicas, placement it was created for, paused, policies
//	  channels: count, then (name, paused, policies)
//	  batches in publication order: count, then each:
//	    raft index, publish time, due, messages
//	    per holder (the backlog, then the channels in order): 0 holds none,
//	      1 holds all, 2 a bitset (8-byte words) of the ones it no longer holds
//	    bodies of messages some holder has: (offset+1, body)…, then 0
//	  per holder: what REQ or TOUCH said: count, then (seq, due, attempts)
//	claims: count, then (name, raft index)
//	placed topics: count, then (name, group, replicas, raft index placed at)
//	groups: count, then (id, members: count, then each)
//	group leaders: count, then (group, node, term)
//	draining nodes: count, then each
//	deleted topics: count, then (name, placement)
//
// Integers are varints; strings and bodies are length-prefixed. Versions
// 2 (without claims), 3 (without placements) and 4 (without placement
// indexes and deleted topics) are still read.
const snapshotVersion = 5

const (
	heldNone byte = iota
	heldAll
	heldSome
)

type snapshot struct {
	f       *fsm
	nodes   map[string]NodeInfo
	claims  map[string]uint64
	placed  map[string]placement
	groups  map[string][]string
	leaders map[string]groupLeader
	drain   []string
	deleted map[string]uint64
	topics  []snapTopic
	files   []*spillFile // kept open and on disk until Release
}

type snapTopic struct {
	name     string
	replicas int
	placed   uint64
	paused   bool
	policies [][]byte
	channels []snapChannel
	holders  []snapHolder // the backlog, then each channel
	batches  []batch      // by raft index
}

type snapChannel struct {
	name     string
	paused   bool
	policies [][]byte
}

type snapHolder struct {
	held  indexSet            // the batches it has all or part of
	gone  map[uint64][]uint64 // raft index → gone bitset of a partly held batch
	marks map[uint64]mark
}

func snapHolderOf(h *holder) snapHolder {
	s := snapHolder{held: h.held.clone(), gone: make(map[uint64][]uint64, len(h.gone)), marks: maps.Clone(h.marks)}
	for index, g := range h.gone {
		s.gone[index] = slices.Clone(g)
	}
	return s
}

// Snapshot implements raft.FSM. Raft calls it between Applies; the state's
// bookkeeping is copied here and Persist reads the bodies back while
// Applies go on. Until Release, the log keeps the entries the snapshot
// reads (fsm.keepIndex) and its spill files stay.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := &snapshot{f: f, nodes: maps.Clone(f.st.nodes), claims: maps.Clone(f.st.claims),
		placed: maps.Clone(f.st.placed), groups: maps.Clone(f.st.groups), leaders: maps.Clone(f.st.leaders),
		drain: sortedKeys(f.st.draining), deleted: maps.Clone(f.st.deleted)}
	var keep uint64
	files := map[*spillFile]bool{}
	for _, name := range f.st.topicNames() {
		t := f.st.topics[name]
		st := snapTopic{name: name, replicas: t.replicas, placed: t.placed, paused: t.paused, policies: t.policies}
		st.holders = append(st.holders, snapHolderOf(t.backlog))
		for _, cname := range sortedKeys(t.channels) {
			c := t.channels[cname]
			st.channels = append(st.channels, snapChannel{name: cname, paused: c.paused, policies: c.policies})
			st.holders = append(st.holders, snapHolderOf(c.held))
		}
		st.batches = make([]batch, 0, t.batches.len())
		t.batches.each(func(b batch) bool {
			st.batches = append(st.batches, b)
			switch {
			case b.spill != nil:
				files[b.spill.file] = true
			case keep == 0 || b.index < keep:
				keep = b.index
			}
			return true
		})
		s.topics = append(s.topics, st)
	}
	for file := range files {
		file.refs++
		s.files = append(s.files, file)
	}
	if keep > 0 {
		f.pins[s] = keep
	}
	return s, nil
}

func sortedKeys[K string | uint64, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Persist implements raft.FSMSnapshot.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	w := &streamWriter{w: bufio.NewWriterSize(sink, 256<<10)}
	err := s.write(w)
	if err == nil {
		err = w.flush()
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("writing replication snapshot: %w", err)
	}
	return sink.Close()
}

func (s *snapshot) write(w *streamWriter) error {
	w.byte(snapshotVersion)
	w.uvarint(uint64(len(s.nodes)))
	for _, addr := range sortedKeys(s.nodes) {
		n := s.nodes[addr]
		w.string(addr)
		w.string(n.TCP)
		w.string(n.API)
	}
	w.uvarint(uint64(len(s.topics)))
	for _, t := range s.topics {
		w.string(t.name)
		w.uvarint(uint64(t.replicas))
		w.uvarint(t.placed)
		w.bool(t.paused)
		w.policies(t.policies)
		w.uvarint(uint64(len(t.channels)))
		for _, c := range t.channels {
			w.string(c.name)
			w.bool(c.paused)
			w.policies(c.policies)
		}
		w.uvarint(uint64(len(t.batches)))
		for _, b := range t.batches {
			if err := s.writeBatch(w, t, b); err != nil {
				return err
			}
		}
		for _, h := range t.holders {
			w.uvarint(uint64(len(h.marks)))
			for _, seq := range sortedKeys(h.marks) {
				w.uvarint(seq)
				w.varint(h.marks[seq].due)
				w.uvarint(uint64(h.marks[seq].attempts))
			}
		}
		if w.err != nil {
			return w.err
		}
	}
	w.uvarint(uint64(len(s.claims)))
	for _, name := range sortedKeys(s.claims) {
		w.string(name)
		w.uvarint(s.claims[name])
	}
	w.uvarint(uint64(len(s.placed)))
	for _, name := range sortedKeys(s.placed) {
		w.string(name)
		w.string(s.placed[name].group)
		w.uvarint(uint64(s.placed[name].replicas))
		w.uvarint(s.placed[name].at)
	}
	w.uvarint(uint64(len(s.groups)))
	for _, id := range sortedKeys(s.groups) {
		w.string(id)
		w.uvarint(uint64(len(s.groups[id])))
		for _, m := range s.groups[id] {
			w.string(m)
		}
	}
	w.uvarint(uint64(len(s.leaders)))
	for _, id := range sortedKeys(s.leaders) {
		w.string(id)
		w.string(s.leaders[id].node)
		w.uvarint(s.leaders[id].term)
	}
	w.uvarint(uint64(len(s.drain)))
	for _, node := range s.drain {
		w.string(node)
	}
	w.uvarint(uint64(len(s.deleted)))
	for _, name := range sortedKeys(s.deleted) {
		w.string(name)
		w.uvarint(s.deleted[name])
	}
	return w.err
}

func (s *snapshot) writeBatch(w *streamWriter, t snapTopic, b batch) error {
	w.uvarint(b.index)
	w.varint(b.ts)
	w.varint(b.due)
	w.uvarint(uint64(b.n))
	var union []uint64 // offsets some holder has
	for _, h := range t.holders {
		gone, held := h.gone[b.index], h.held.has(b.index)
		switch {
		case !held:
			w.byte(heldNone)
			continue
		case gone == nil:
			w.byte(heldAll)
		default:
			w.byte(heldSome)
			w.uvarint(uint64(len(gone)))
			for _, word := range gone {
				w.word(word)
			}
		}
		if union == nil {
			union = make([]uint64, (b.n+63)/64)
		}
		for k := range union {
			if gone == nil {
				union[k] = ^uint64(0)
			} else {
				union[k] |= ^gone[k]
			}
		}
	}
	bodies, err := s.f.bodies.bodies(b)
	if err != nil {
		return err
	}
	for i := 0; i < b.n; i++ {
		if union[i/64]&(1<<(i%64)) != 0 {
			w.uvarint(uint64(i) + 1)
			w.bytes(bodies[i])
		}
	}
	w.uvarint(0)
	return w.err
}

// Release implements raft.FSMSnapshot.
func (s *snapshot) Release() {
	s.f.mu.Lock()
	delete(s.f.pins, s)
	var unused []*spillFile
	for _, file := range s.files {
		if file.refs--; file.refs == 0 {
			unused = append(unused, file)
		}
	}
	s.files = nil
	s.f.mu.Unlock()
	s.f.removeSpills(unused)
}

// Restore implements raft.FSM: the state becomes the snapshot's, its
// bodies written to a new spill file.
func (f *fsm) Restore(r io.ReadCloser) error {
	defer r.Close()
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	f.mu.Lock()
	mirroring := f.mirroring
	f.mu.Unlock()
	if mirroring {
		return errors.New("restoring a snapshot while leading")
	}
	file, err := createSpill(f.dir)
	if err != nil {
		return err
	}
	st, err := readSnapshot(&streamReader{r: bufio.NewReaderSize(r, 256<<10)}, newSpillWriter(file))
	if err != nil {
		f.removeSpills([]*spillFile{file})
		return fmt.Errorf("reading replication snapshot: %w", err)
	}
	var unused []*spillFile
	if file.refs == 0 {
		unused = append(unused, file)
	}
	f.mu.Lock()
	for _, t := range f.st.topics {
		for _, c := range t.channels {
			f.st.release(t, c.held)
		}
		f.st.release(t, t.backlog)
	}
	unused = append(unused, f.st.unused...)
	f.st = st
	names := f.publishTopicsLocked(0)
	f.mu.Unlock()
	if names != nil {
		f.saveNames(names, 0)
	}
	f.removeSpills(unused)
	if f.onChange != nil {
		f.onChange()
	}
	return nil
}

func readSnapshot(r *streamReader, spill *spillWriter) (*state, error) {
	version := r.byte()
	if r.err == nil && (version < 2 || version > snapshotVersion) {
		return nil, fmt.Errorf("snapshot version %d not known", version)
	}
	st := newState()
	for range r.count() {
		addr := r.string()
		st.nodes[addr] = NodeInfo{TCP: r.string(), API: r.string()}
	}
	for range r.count() {
		name := r.string()
		t := newTopicState(int(r.uvarint()))
		if version >= 5 {
			t.placed = r.uvarint()
		}
		t.paused = r.bool()
		t.policies = r.policies()
		holders := []*holder{t.backlog}
		for range r.count() {
			c := &channelState{held: newHolder()}
			cname := r.string()
			c.paused = r.bool()
			c.policies = r.policies()
			t.channels[cname] = c
			holders = append(holders, c.held)
		}
		for range r.count() {
			if err := readBatch(r, spill, t, holders); err != nil {
				return nil, fmt.Errorf("topic %s: %w", name, err)
			}
		}
		for _, h := range holders {
			for range r.count() {
				seq, due, attempts := r.uvarint(), r.varint(), r.uvarint()
				h.setMark(t, seq, mark{due, uint16(min(attempts, math.MaxUint16))})
			}
		}
		if r.err != nil {
			return nil, r.err
		}
		st.topics[name] = t
	}
	if version >= 3 {
		for range r.count() {
			name := r.string()
			st.claims[name] = r.uvarint()
		}
	}
	if version >= 4 {
		for range r.count() {
			name := r.string()
			p := placement{group: r.string(), replicas: int(r.uvarint())}
			if version >= 5 {
				p.at = r.uvarint()
			}
			st.placed[name] = p
		}
		for range r.count() {
			id := r.string()
			members := make([]string, 0, 3)
			for range r.count() {
				members = append(members, r.string())
			}
			st.groups[id] = members
		}
		for range r.count() {
			id := r.string()
			st.leaders[id] = groupLeader{node: r.string(), term: r.uvarint()}
		}
		for range r.count() {
			st.draining[r.string()] = true
		}
	}
	if version >= 5 {
		for range r.count() {
			name := r.string()
			st.deleted[name] = r.uvarint()
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	if err := spill.flush(); err != nil {
		return nil, err
	}
	return st, nil
}

func readBatch(r *streamReader, spill *spillWriter, t *topicState, holders []*holder) error {
	b := batch{index: r.uvarint(), ts: r.varint(), due: r.varint()}
	n := r.uvarint()
	if r.err != nil {
		return r.err
	}
	if _, dup := t.batches.get(b.index); n == 0 || n > maxBatch || dup {
		return fmt.Errorf("batch %d of %d messages", b.index, n)
	}
	b.n = int(n)
	words := (b.n + 63) / 64
	held := 0
	for _, h := range holders {
		left := b.n
		var gone []uint64
		switch r.byte() {
		case heldNone:
			continue
		case heldAll:
		case heldSome:
			if r.uvarint() != uint64(words) {
				return fmt.Errorf("batch %d: a bitset of the wrong size", b.index)
			}
			gone = make([]uint64, words)
			for k := range gone {
				gone[k] = r.word()
			}
			left -= popcount(gone)
		default:
			return fmt.Errorf("batch %d: holder tag not known", b.index)
		}
		if r.err != nil {
			return r.err
		}
		if left <= 0 {
			return fmt.Errorf("batch %d: a holder that holds none of it", b.index)
		}
		h.held.add(b.index)
		if b.n > 1 {
			h.left[b.index] = int32(left)
		}
		if gone != nil {
			h.gone[b.index] = gone
		}
		h.count += left
		held++
	}
	if held == 0 {
		return fmt.Errorf("batch %d: no holder", b.index)
	}
	b.spill = spill.begin()
	have := make([]bool, b.n)
	for {
		i := r.uvarint()
		if i == 0 || r.err != nil {
			break
		}
		if i > n {
			return fmt.Errorf("batch %d: body of message %d", b.index, i-1)
		}
		have[i-1] = true
		if err := spill.add(b.spill, int(i-1), r.bytes()); err != nil {
			return err
		}
	}
	for _, h := range holders {
		for i := range b.n {
			if h.holds(b.index, b, i) && !have[i] {
				return fmt.Errorf("batch %d: message %d is held but has no body", b.index, i)
			}
		}
	}
	if !t.batches.put(b, held) {
		return fmt.Errorf("batch %d: not after the batches before it", b.index)
	}
	b.spill.file.refs++
	return r.err
}

// streamWriter writes a snapshot's fields; the first error sticks.
type streamWriter struct {
	w   *bufio.Writer
	buf []byte
	err error
}

func (w *streamWriter) write(p []byte) {
	if w.err == nil {
		_, w.err = w.w.Write(p)
	}
}

func (w *streamWriter) byte(v byte) {
	if w.err == nil {
		w.err = w.w.WriteByte(v)
	}
}

func (w *streamWriter) bool(v bool) { w.byte(boolByte(v)) }

func (w *streamWriter) uvarint(v uint64) { w.write(binary.AppendUvarint(w.buf[:0], v)) }

func (w *streamWriter) varint(v int64) { w.write(binary.AppendVarint(w.buf[:0], v)) }

func (w *streamWriter) word(v uint64) { w.write(binary.LittleEndian.AppendUint64(w.buf[:0], v)) }

func (w *streamWriter) bytes(p []byte) {
	w.uvarint(uint64(len(p)))
	w.write(p)
}

func (w *streamWriter) string(s string) {
	w.uvarint(uint64(len(s)))
	if w.err == nil {
		_, w.err = w.w.WriteString(s)
	}
}

func (w *streamWriter) policies(ps [][]byte) {
	w.uvarint(uint64(len(ps)))
	for _, p := range ps {
		w.bytes(p)
	}
}

func (w *streamWriter) flush() error {
	if w.err == nil {
		w.err = w.w.Flush()
	}
	return w.err
}

// maxSnapshotField bounds a string or body read from a snapshot, so that
// a corrupt length cannot ask for an absurd allocation.
const maxSnapshotField = 1 << 30

// streamReader reads a snapshot's fields; the first error sticks and
// every later read returns zero values.
type streamReader struct {
	r   *bufio.Reader
	err error
}

func (r *streamReader) fail(err error) {
	if r.err == nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		r.err = err
	}
}

func (r *streamReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(r.r)
	r.fail(err)
	return v
}

func (r *streamReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, err := binary.ReadVarint(r.r)
	r.fail(err)
	return v
}

// count is a number of records to follow; each takes at least a byte,
// which bounds it by what a corrupt stream can claim.
func (r *streamReader) count() int {
	n := r.uvarint()
	if n > maxSnapshotField {
		r.fail(fmt.Errorf("a count of %d", n))
		return 0
	}
	return int(n)
}

func (r *streamReader) byte() byte {
	if r.err != nil {
		return 0
	}
	v, err := r.r.ReadByte()
	r.fail(err)
	return v
}

func (r *streamReader) bool() bool { return r.byte() == 1 }

func (r *streamReader) word() uint64 {
	var b [8]byte
	if r.err == nil {
		_, err := io.ReadFull(r.r, b[:])
		r.fail(err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

func (r *streamReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > maxSnapshotField {
		r.fail(fmt.Errorf("a field of %d bytes", n))
		return nil
	}
	p := make([]byte, n)
	_, err := io.ReadFull(r.r, p)
	r.fail(err)
	return p
}

func (r *streamReader) string() string { return string(r.bytes()) }

func (r *streamReader) policies() [][]byte {
	n := r.count()
	ps := make([][]byte, 0, min(n, 64))
	for range n {
		ps = append(ps, r.bytes())
	}
	if r.err != nil {
		return nil
	}
	if len(ps) == 0 {
		return nil
	}
	return ps
}
