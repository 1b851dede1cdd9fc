package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/nsqgo/nsq/internal/clustermux"
)

// The control channel carries the calls between members that are not
// Raft's own: a new node asking to be added, and the steps of moving a
// data group's replica (add a voter, see it caught up, remove one). It is
// HTTP on a share of the cluster listener, so a call reaches a peer
// wherever Raft does, under the cluster's mutual TLS when it runs it, and
// nothing that reaches only a node's client ports can make one.

// controlStream names the control channel's share of the cluster
// listener; group ids are numbers, so it is no group's.
const controlStream = "control"

// controlNotLeader opens the answer (HTTP 503) of a node asked to do what
// only a group's leader does; the leader's cluster address follows when
// the node knows it.
const controlNotLeader = "NOT_LEADER"

// errControlNotLeader is a control call answered by a node that does not
// lead the group; the caller asks the leader it names, if any.
type errControlNotLeader struct{ leader string }

func (e *errControlNotLeader) Error() string {
	if e.leader == "" {
		return "not the leader, and no leader known"
	}
	return "not the leader; the leader is " + e.leader
}

// control serves and makes control calls.
type control struct {
	stream *clustermux.Stream
	srv    *http.Server
	client *http.Client
	done   chan struct{}
}

func (n *Node) startControl() error {
	stream, err := n.mux.Stream(controlStream)
	if err != nil {
		return fmt.Errorf("cluster listener for control calls: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /join", n.handleJoin)
	mux.HandleFunc("POST /commit", n.handleCommit)
	mux.HandleFunc("POST /group/voters", n.handleGroupVoters)
	mux.HandleFunc("GET /group/caught-up", n.handleCaughtUp)
	mux.HandleFunc("POST /group/config", n.handleGroupConfig)
	mux.HandleFunc("POST /rebalance", n.handleRebalance)
	mux.HandleFunc("POST /remove", n.handleRemove)
	mux.HandleFunc("POST /members", n.handleMembers)
	mux.HandleFunc("POST /removed", n.handleRemoved)
	c := &control{stream: stream, done: make(chan struct{}),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			timeout := n.cfg.Timeout
			if d, ok := ctx.Deadline(); ok {
				timeout = time.Until(d)
			}
			return stream.Dial(raft.ServerAddress(addr), timeout)
		},
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     time.Minute,
	}
	// Calls are bounded by their contexts: a move waits for a replica to
	// catch up, which takes as long as the group's state takes to copy.
	c.client = &http.Client{Transport: tr}
	go func() {
		defer close(c.done)
		_ = c.srv.Serve(stream) // ends when the stream closes
	}()
	n.ctl = c
	return nil
}

func (c *control) close() {
	_ = c.srv.Close()
	_ = c.stream.Close()
	<-c.done
	c.client.CloseIdleConnections()
}

// call makes a control call to the member at addr (its cluster address)
// and returns the answer's body.
func (c *control) call(ctx context.Context, method, addr, path string, q url.Values) ([]byte, error) {
	return c.send(ctx, method, addr, path, q, nil)
}

// send is call with a request body.
func (c *control) send(ctx context.Context, method, addr, path string, q url.Values, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path+"?"+q.Encode(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("control call %s to %s: %w", path, addr, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	answer = bytes.TrimSpace(answer)
	switch {
	case resp.StatusCode == http.StatusOK:
		return answer, nil
	case resp.StatusCode == http.StatusServiceUnavailable && bytes.HasPrefix(answer, []byte(controlNotLeader)):
		return nil, &errControlNotLeader{leader: strings.TrimSpace(strings.TrimPrefix(string(answer), controlNotLeader))}
	}
	return nil, &controlRefusal{status: resp.StatusCode, msg: fmt.Sprintf("control call %s to %s: %d %s", path, addr, resp.StatusCode, answer)}
}

// controlRefusal is a control call's answer other than 200 or not-leader.
type controlRefusal struct {
	status int
	msg    string
}

func (e *controlRefusal) Error() string { return e.msg }

// callLeader makes a control call to a group's leader: to the first of
// candidates (the members that may lead it), then to whichever leader
// each answer names, or the next candidate when it names none or cannot
// be reached, until one does it, one refuses it (that answer is
// returned), or ctx ends.
func (c *control) callLeader(ctx context.Context, candidates []string, path string, q url.Values) ([]byte, error) {
	if len(candidates) == 0 {
		return nil, fmt.Errorf("control call %s: %w", path, ErrNoLeader)
	}
	addr, next := candidates[0], 1
	for {
		body, err := c.call(ctx, http.MethodPost, addr, path, q)
		if err == nil {
			return body, nil
		}
		var nl *errControlNotLeader
		switch {
		case errors.As(err, &nl) && nl.leader != "" && nl.leader != addr:
			addr = nl.leader
		case errors.As(err, &nl) || isUnreachable(err):
			addr, next = candidates[next%len(candidates)], next+1
		default:
			return nil, err
		}
		if !sleepCtx(ctx, leaderRetry) {
			return nil, err
		}
	}
}

// notLeader answers a call only a leader of g may take, naming the leader
// this node knows.
func notLeader(w http.ResponseWriter, g *group) {
	leader := ""
	if g != nil {
		addr, _ := g.raft.LeaderWithID()
		leader = string(addr)
	}
	http.Error(w, strings.TrimSpace(controlNotLeader+" "+leader), http.StatusServiceUnavailable)
}

// maxCommitBody bounds the entry a /commit carries: the entries nodes send
// that way are a few names and addresses.
const maxCommitBody = 64 << 10

// handleCommit commits in group ?group=, which this node leads, an entry
// another member sent (commitTo): what a node outside the group, or not
// leading it, has to say there.
func (n *Node) handleCommit(w http.ResponseWriter, req *http.Request) {
	id := req.URL.Query().Get("group")
	body, err := io.ReadAll(io.LimitReader(req.Body, maxCommitBody+1))
	if err != nil || len(body) > maxCommitBody {
		http.Error(w, "entry too large", http.StatusBadRequest)
		return
	}
	e, err := decodeEntry(body)
	if err != nil || !slices.Contains([]op{opGroupLeader, opGroupPrefer, opDrain, opDeleteTopic, opGroupVoters}, e.op) {
		http.Error(w, "not an entry another node may commit", http.StatusBadRequest)
		return
	}
	g := n.meta
	if id != theGroup {
		g = n.dataGroup(id)
	}
	if g == nil || !g.isLeader() {
		notLeader(w, g)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), n.cfg.Timeout)
	defer cancel()
	if err := g.commitSettled(ctx, e); err != nil {
		if refused(err) || errors.Is(err, ErrNotCommitted) {
			notLeader(w, g)
			return
		}
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// handleJoin adds the node at ?node= (its cluster address) to the meta
// group as a voter, and records where its daemon is reached (?tcp=,
// ?api=); only the meta group's leader does.
func (n *Node) handleJoin(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	node := q.Get("node")
	if _, _, err := net.SplitHostPort(node); err != nil {
		http.Error(w, "node must be a cluster address host:port", http.StatusBadRequest)
		return
	}
	if !n.meta.isLeader() {
		notLeader(w, n.meta)
		return
	}
	if err := n.meta.addVoter(node); err != nil {
		answerChange(w, n.meta, err)
		return
	}
	e := &entry{op: opNode, node: node, tcp: q.Get("tcp"), api: q.Get("api")}
	if err := n.meta.commit(e.encode()); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	n.cfg.Log.Info("replication: node joined the cluster", "node", node)
}

// handleGroupVoters adds ?add= to, or removes ?remove= from, the voters of
// data group ?group=; only the group's leader does.
func (n *Node) handleGroupVoters(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	g := n.dataGroup(q.Get("group"))
	if g == nil || !g.isLeader() {
		notLeader(w, g)
		return
	}
	var err error
	switch {
	case q.Get("add") != "":
		err = g.addVoter(q.Get("add"))
	case q.Get("remove") != "":
		err = g.removeVoter(q.Get("remove"))
	default:
		http.Error(w, "add or remove a voter", http.StatusBadRequest)
		return
	}
	if err != nil {
		answerChange(w, g, err)
	}
}

// answerChange answers a membership change that failed: as a node that
// does not lead when it lost the leadership meanwhile (the caller asks the
// next leader), else with the error.
func answerChange(w http.ResponseWriter, g *group, err error) {
	if refused(err) || errors.Is(err, raft.ErrLeadershipLost) {
		notLeader(w, g)
		return
	}
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

// handleGroupConfig answers data group ?group='s voters, comma-separated,
// as its leader's Raft configuration has them.
func (n *Node) handleGroupConfig(w http.ResponseWriter, req *http.Request) {
	g := n.dataGroup(req.URL.Query().Get("group"))
	if g == nil || !g.isLeader() {
		notLeader(w, g)
		return
	}
	voters, err := g.votersNow()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprint(w, strings.Join(voters, ","))
}

// handleCaughtUp answers "true" when this node runs data group ?group=,
// knows its leader and has applied what it knows to be committed.
func (n *Node) handleCaughtUp(w http.ResponseWriter, req *http.Request) {
	g := n.dataGroup(req.URL.Query().Get("group"))
	fmt.Fprint(w, g != nil && g.caughtUp())
}

// addVoter makes addr a voter of the group (a no-op if it is one): the
// change is committed on a majority of the new configuration when it
// returns.
func (g *group) addVoter(addr string) error {
	if err := futureErr(g.raft.AddVoter(raft.ServerID(addr), raft.ServerAddress(addr), 0, g.n.cfg.Timeout), g.futureLimit()); err != nil {
		return fmt.Errorf("adding %s to group %s: %w", addr, g.id, err)
	}
	return nil
}

// removeVoter takes addr out of the group (a no-op if it is not in it). A
// leader that removes itself steps down once the change is committed.
func (g *group) removeVoter(addr string) error {
	if err := futureErr(g.raft.RemoveServer(raft.ServerID(addr), 0, g.n.cfg.Timeout), g.futureLimit()); err != nil {
		return fmt.Errorf("removing %s from group %s: %w", addr, g.id, err)
	}
	return nil
}

// votersNow is the group's voters as its Raft configuration has them now.
func (g *group) votersNow() ([]string, error) {
	f := g.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	return votersIn(f.Configuration()), nil
}

// votersIn is the voters of a Raft configuration.
func votersIn(c raft.Configuration) []string {
	var out []string
	for _, s := range c.Servers {
		if s.Suffrage == raft.Voter {
			out = append(out, string(s.ID))
		}
	}
	return out
}

// isUnreachable reports whether a control call failed before any answer
// (the member down, or the connection cut), which a retry may get past.
func isUnreachable(err error) bool {
	var ue *url.Error
	return errors.As(err, &ue)
}
