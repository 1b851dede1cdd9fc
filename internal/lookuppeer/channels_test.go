package lookuppeer_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/nsqgo/nsq/internal/lookuppeer"
)

func TestQueryChannels(t *testing.T) {
	a := startLookupd(t, "127.0.0.1:0")
	b := startLookupd(t, "127.0.0.1:0")
	post := func(addr, path string) {
		t.Helper()
		resp, err := http.Post("http://"+addr+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("POST %s = %d", path, resp.StatusCode)
		}
	}
	post(a.HTTPAddr().String(), "/channel/create?topic=t&channel=z")
	post(a.HTTPAddr().String(), "/channel/create?topic=t&channel=x%23ephemeral")
	post(b.HTTPAddr().String(), "/channel/create?topic=t&channel=z")
	post(b.HTTPAddr().String(), "/channel/create?topic=t&channel=y")
	post(b.HTTPAddr().String(), "/channel/create?topic=other&channel=w")

	ctx := context.Background()
	addrs := []string{a.HTTPAddr().String(), "http://" + b.HTTPAddr().String()}
	got, err := lookuppeer.QueryChannels(ctx, nil, addrs, "t")
	if err != nil || !reflect.DeepEqual(got, []string{"x#ephemeral", "y", "z"}) {
		t.Errorf("QueryChannels = %v, %v", got, err)
	}
	got, err = lookuppeer.QueryChannels(ctx, nil, addrs, "none")
	if err != nil || got == nil || len(got) != 0 {
		t.Errorf("QueryChannels(unknown topic) = %#v, %v", got, err)
	}
	got, err = lookuppeer.QueryChannels(ctx, nil, nil, "t")
	if err != nil || len(got) != 0 {
		t.Errorf("QueryChannels(no lookupd) = %v, %v", got, err)
	}

	// A failing lookupd is reported; the others' answers still count.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("topic") != "t" || r.Header.Get("Accept") != "application/vnd.nsq; version=1.0" {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		http.Error(w, `{"message":"INTERNAL_ERROR"}`, http.StatusInternalServerError)
	}))
	defer bad.Close()
	got, err = lookuppeer.QueryChannels(ctx, bad.Client(), []string{bad.URL, a.HTTPAddr().String(), "127.0.0.1:1"}, "t")
	if !reflect.DeepEqual(got, []string{"x#ephemeral", "z"}) {
		t.Errorf("partial result = %v", got)
	}
	if err == nil || !strings.Contains(err.Error(), "answered 500") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("err = %v, want both failures", err)
	}
}
