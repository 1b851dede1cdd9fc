package lookupd

import (
	"net/http"
	"net/http/pprof"
	runtimepprof "runtime/pprof"

	"github.com/julienschmidt/httprouter"

	"github.com/nsqgo/nsq/internal/httpapi"
)

// addPprof mounts Go's profiler where NSQ has it: the index at /debug/pprof
// (no trailing slash) and the pages below it. One parameterised route serves
// every named profile, including those NSQ lacks (allocs, mutex), and an
// unknown name gets the API's NOT_FOUND rather than pprof's text page.
func addPprof(r *httprouter.Router) {
	r.HandlerFunc(http.MethodGet, "/debug/pprof", pprof.Index)
	r.HandlerFunc(http.MethodPost, "/debug/pprof/symbol", pprof.Symbol)
	r.GET("/debug/pprof/:name", func(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
		switch name := ps.ByName("name"); name {
		case "cmdline":
			pprof.Cmdline(w, req)
		case "symbol":
			pprof.Symbol(w, req)
		case "profile":
			pprof.Profile(w, req)
		case "trace":
			pprof.Trace(w, req)
		default:
			if runtimepprof.Lookup(name) == nil {
				httpapi.RespondV1(w, http.StatusNotFound, httpapi.Err{Code: http.StatusNotFound, Text: "NOT_FOUND"})
				return
			}
			pprof.Handler(name).ServeHTTP(w, req)
		}
	})
}
