package admin

import (
	"net/http"
	"strings"
	"testing"
)

// TestClusterPageLeavesRemovedNodesOut: a node removed from the cluster
// answers /cluster with "removed" and nothing else; the page takes the
// members and topics from a member, and lists the removed node apart.
func TestClusterPageLeavesRemovedNodesOut(t *testing.T) {
	fc := newFakeCluster(t, 2, 1, 1, 0)
	removed, member := fc.nodes[0], fc.nodes[1]
	removed.answer("/cluster", http.StatusOK, `{"removed":true,"members":[],"groups":[],"topics":[]}`)
	member.answer("/cluster", http.StatusOK, `{"members":[{"address":"10.0.0.2:4200","tcp_address":"10.0.0.2:4150","http_address":"10.0.0.2:4151","voter":true,"self":true}],`+
		`"groups":[{"id":"0","leader":"10.0.0.2:4200","state":"Leader"}],"topics":[{"topic":"topic000","replicas":1,"group":"0","replica_set":["10.0.0.2:4200"],"leader":"10.0.0.2:4150"}]}`)
	_, base := startAdmin(t, func(o *Options) {
		o.NSQLookupdHTTPAddresses = []string{fc.lookupd.Listener.Addr().String()}
	})
	code, body := get(t, base+"/cluster")
	if code != http.StatusOK {
		t.Fatalf("the cluster page: %d", code)
	}
	removedAddr := strings.TrimPrefix(removed.srv.URL, "http://")
	wantIn(t, "the cluster page", body, "10.0.0.2:4200", "topic000", "Removed from the cluster: "+removedAddr)
}
