// Package httpapi holds the HTTP conventions nsqd, nsqlookupd and nsqadmin
// share (docs/protocol.md#http): the V1 response shape, the plain-text
// endpoints, router error pages and a server with sane timeouts.
package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/nsqgo/nsq/internal/logging"
)

// Err is an API error: Code is the HTTP status, Text the NSQ message token.
type Err struct {
	Code int
	Text string
}

func (e Err) Error() string { return e.Text }

// Handler returns a payload or an error. A string or []byte payload is sent
// raw, nil means an empty 200, anything else is JSON.
type Handler func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) (any, error)

// V1 adapts h to NSQ's V1 response conventions.
func V1(h Handler) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		data, err := h(w, r, ps)
		if err != nil {
			RespondV1(w, statusOf(err), err)
			return
		}
		RespondV1(w, http.StatusOK, data)
	}
}

// PlainText adapts h to a bare text response without the NSQ header.
func PlainText(h Handler) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		data, err := h(w, r, ps)
		code := http.StatusOK
		if err != nil {
			code = statusOf(err)
			data = err.Error()
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		switch d := data.(type) {
		case string:
			_, _ = w.Write([]byte(d))
		case []byte:
			_, _ = w.Write(d)
		}
	}
}

func statusOf(err error) int {
	if e, ok := err.(Err); ok {
		return e.Code
	}
	return http.StatusInternalServerError
}

const jsonContentType = "application/json; charset=utf-8"

// JSONStream is a payload that writes its own JSON to the response, for an
// answer too large to build in memory first. A write error is the client's
// problem (gone away); the status has been sent by then.
type JSONStream func(w io.Writer)

// RespondV1 writes data (or an error) in the V1 shape.
func RespondV1(w http.ResponseWriter, code int, data any) {
	w.Header().Set("X-NSQ-Content-Type", "nsq; version=1.0")
	if stream, ok := data.(JSONStream); ok {
		w.Header().Set("Content-Type", jsonContentType)
		w.WriteHeader(code)
		stream(w)
		return
	}
	var body []byte
	isJSON := false
	switch d := data.(type) {
	case nil:
	case string:
		body = []byte(d)
	case []byte:
		body = d
	case Err:
		isJSON = true
		body, _ = json.Marshal(struct {
			Message string `json:"message"`
		}{d.Text})
	case error:
		isJSON = true
		body, _ = json.Marshal(struct {
			Message string `json:"message"`
		}{d.Error()})
	default:
		isJSON = true
		var err error
		body, err = json.Marshal(d)
		if err != nil {
			code = http.StatusInternalServerError
			body = []byte(`{"message":"INTERNAL_ERROR"}`)
		}
	}
	if isJSON {
		w.Header().Set("Content-Type", jsonContentType)
	}
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// NewRouter returns a router whose 404, 405 and panic answers are NSQ's
// (docs/protocol.md#http-router), each logged as Logged logs a request. As
// NSQ's, it redirects a path that differs from a route by a trailing slash
// or by case (/stats/, /STATS) to the route: 301 for GET, 307 for other
// methods (httprouter's answers), and does not log the redirect.
func NewRouter(logger *slog.Logger) *httprouter.Router {
	r := httprouter.New()
	r.HandleMethodNotAllowed = true
	r.NotFound = handlerOf(Logged(logger, answer(Err{http.StatusNotFound, "NOT_FOUND"})))
	r.MethodNotAllowed = handlerOf(Logged(logger, answer(Err{http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED"})))
	internalError := Logged(logger, answer(Err{http.StatusInternalServerError, "INTERNAL_ERROR"}))
	r.PanicHandler = func(w http.ResponseWriter, req *http.Request, p any) {
		logging.Logf(logger, slog.LevelError, "panic in HTTP handler - %s", p)
		internalError(w, req, nil)
	}
	return r
}

// answer always answers e.
func answer(e Err) httprouter.Handle {
	return func(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) { RespondV1(w, e.Code, e) }
}

func handlerOf(h httprouter.Handle) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h(w, r, nil) })
}

// Logged logs each request h answers at info level, as NSQ's daemons do:
//
//	200 GET /ping (127.0.0.1:50002) 12.345µs
//
// the status, method, URI, the client's address and the time h took.
func Logged(logger *slog.Logger, h httprouter.Handle) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		if !logger.Enabled(r.Context(), slog.LevelInfo) {
			h(w, r, ps)
			return
		}
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h(sw, r, ps)
		logging.Logf(logger, slog.LevelInfo, "%d %s %s (%s) %s", sw.status, r.Method, r.URL.RequestURI(), r.RemoteAddr, time.Since(start))
	}
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap gives http.ResponseController the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Limits of the daemons' HTTP servers. NSQ sets none, which lets a slow
// client hold a connection and its buffers forever
// (docs/protocol.md#http-limits).
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 60 * time.Second
	WriteTimeout      = 60 * time.Second
	IdleTimeout       = 120 * time.Second
	MaxHeaderBytes    = 64 << 10
)

// NewServer wraps h in an http.Server with the limits above.
func NewServer(h http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// Serve runs srv on l until it is shut down; the expected close error is not
// reported.
func Serve(srv *http.Server, l net.Listener) error {
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}
