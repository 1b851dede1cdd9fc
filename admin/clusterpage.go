package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/nsqgo/nsq/internal/clusterdoc"
	"github.com/nsqgo/nsq/internal/httpapi"
)

// groupOnNode is one group as one node sees it: each node reports its own
// role and indexes, so the page has a row per group and node.
type groupOnNode struct {
	clusterdoc.Group
	Node string // the answering nsqd's HTTP address
}

// clusterPageView is what the cluster page shows: the members and topics
// from the first node that answered (every member knows them all), the
// groups from every node, and which nodes are not in a cluster.
type clusterPageView struct {
	Members  []clusterdoc.Member
	Groups   []groupOnNode
	Topics   []clusterdoc.Topic
	Answered int
	Outside  []string // nsqd nodes started without --cluster-address
	Removed  []string // nsqd nodes removed from the cluster (POST /cluster/remove)
}

// raftClusterView asks every nsqd node for its GET /cluster. A node
// without a cluster answers 404, which puts it in Outside, not in the
// errors.
func (a *Admin) raftClusterView(ctx context.Context) (*clusterPageView, []NodeError, error) {
	producers, errs, err := a.nodes(ctx, false)
	if err != nil {
		return nil, errs, err
	}
	type answer struct {
		addr    string
		view    clusterdoc.Cluster
		outside bool
	}
	c := a.cluster
	got, ferrs := fanOut(ctx, c.limit, httpAddrs(producers), func(ctx context.Context, addr string) (answer, error) {
		var v clusterdoc.Cluster
		err := c.get(ctx, "nsqd", addr, "/cluster", &v)
		if isNotFound(err) {
			return answer{addr: addr, outside: true}, nil
		}
		return answer{addr: addr, view: v}, err
	}, nil)
	errs = joinErrs(errs, ferrs)
	slices.SortFunc(got, func(x, y answer) int { return strings.Compare(x.addr, y.addr) })
	pv := &clusterPageView{}
	for _, ans := range got {
		if ans.outside {
			pv.Outside = append(pv.Outside, ans.addr)
			continue
		}
		if ans.view.Removed { // it knows nothing current of the cluster
			pv.Removed = append(pv.Removed, ans.addr)
			continue
		}
		pv.Answered++
		if pv.Members == nil {
			pv.Members, pv.Topics = ans.view.Members, ans.view.Topics
		}
		pv.learnAddresses(ans.view.Members)
		for _, g := range ans.view.Groups {
			pv.Groups = append(pv.Groups, groupOnNode{g, ans.addr})
		}
	}
	slices.SortStableFunc(pv.Groups, func(x, y groupOnNode) int { return strings.Compare(x.ID, y.ID) })
	return pv, errs, nil
}

// learnAddresses fills in the members' client addresses that one node's
// answer knows: a node always knows its own, but another's only once that
// one has led, so the page asks every node and puts their answers
// together.
func (pv *clusterPageView) learnAddresses(ms []clusterdoc.Member) {
	for _, m := range ms {
		i := slices.IndexFunc(pv.Members, func(k clusterdoc.Member) bool { return k.Address == m.Address })
		if i < 0 {
			continue
		}
		if pv.Members[i].TCPAddress == "" {
			pv.Members[i].TCPAddress = m.TCPAddress
		}
		if pv.Members[i].HTTPAddress == "" {
			pv.Members[i].HTTPAddress = m.HTTPAddress
		}
	}
}

func (a *Admin) clusterPage(w http.ResponseWriter, req *http.Request) {
	pv, errs, err := a.raftClusterView(req.Context())
	if err != nil {
		a.renderErr(w, req, err, errs)
		return
	}
	v := a.newView(req, "Cluster", "cluster")
	v.Errors = errs
	v.Data = pv
	a.render(w, http.StatusOK, "cluster", v)
}

// moveReplicas asks a cluster member to rebalance the replicas, or to
// move every replica off member and remove it (action "remove"), and says
// what it moved. A member that has not finished within the request
// timeout goes on (nsqd does not stop when its caller does), and the page
// says so.
func (a *Admin) moveReplicas(req *http.Request, action, member string) (string, []NodeError, error) {
	path, done, asked := "/cluster/rebalance", "Rebalanced the replicas", "the rebalance"
	if action == "remove" {
		if member == "" {
			return "", nil, httpapi.Err{Code: http.StatusBadRequest, Text: "MISSING_ARG_NODE"}
		}
		path, done, asked = "/cluster/remove?node="+url.QueryEscape(member), "Removed "+member, "the removal of "+member
	}
	ps, errs, err := a.nodes(req.Context(), false)
	if err != nil {
		return "", errs, err
	}
	for _, addr := range httpAddrs(ps) {
		var answer struct {
			Moves []json.RawMessage `json:"moves"`
		}
		err := a.cluster.do(req.Context(), http.MethodPost, httpURL(addr, path), nil, &answer)
		switch {
		case isNotFound(err):
			continue // not in a cluster
		case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
			return fmt.Sprintf("Asked %s for %s, which had not finished within the request timeout and goes on: the groups below show its moves", addr, asked), errs, nil
		case err != nil:
			return "", errs, fmt.Errorf("%w: %w", errUpstream, NodeError{Addr: addr, Err: err})
		}
		a.invalidate()
		return fmt.Sprintf("%s: %d move(s), through %s", done, len(answer.Moves), addr), errs, nil
	}
	return "", errs, fmt.Errorf("%w: no nsqd node is in a Raft cluster", errUpstream)
}

// isTimeout reports whether err is a request that ran out of time.
func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}
