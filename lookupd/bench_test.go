package lookupd

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
)

const (
	benchTopics    = 1000
	benchProducers = 100
)

// benchDB registers benchTopics topics, each with two channels, on each of
// benchProducers peers: 100,000 topic and 200,000 channel memberships.
func benchDB() *RegistrationDB {
	db := NewRegistrationDB()
	now := time.Now()
	for p := 0; p < benchProducers; p++ {
		id := fmt.Sprintf("10.0.%d.%d:%d", p/256, p%256, 40000+p)
		peer := NewPeer(id, PeerInfo{
			RemoteAddress:    id,
			Hostname:         fmt.Sprintf("nsqd-%03d.example.com", p),
			BroadcastAddress: fmt.Sprintf("nsqd-%03d.example.com", p),
			TCPPort:          4150,
			HTTPPort:         4151,
			Version:          "1.3.0",
		}, now)
		db.AddProducer(Registration{CategoryClient, "", ""}, peer)
		for t := 0; t < benchTopics; t++ {
			topic := fmt.Sprintf("topic-%04d", t)
			db.AddProducer(Registration{CategoryTopic, topic, ""}, peer)
			db.AddProducer(Registration{CategoryChannel, topic, "archive"}, peer)
			db.AddProducer(Registration{CategoryChannel, topic, "workers"}, peer)
		}
	}
	return db
}

// discardResponse is a reusable ResponseWriter, so the benchmark measures
// the handler rather than httptest's recorder.
type discardResponse struct {
	h    http.Header
	code int
	n    int
}

func (d *discardResponse) Header() http.Header         { return d.h }
func (d *discardResponse) WriteHeader(code int)        { d.code = code }
func (d *discardResponse) Write(b []byte) (int, error) { d.n += len(b); return len(b), nil }

func benchHandler(b *testing.B) http.Handler {
	opts := NewOptions()
	opts.Logger = logging.Discard()
	return newHTTPHandler(benchDB(), opts, opts.Logger)
}

// BenchmarkLookup measures GET /lookup through the router and handler on a
// DB of 1,000 topics × 100 producers; each answer lists 100 producers.
func BenchmarkLookup(b *testing.B) {
	h := benchHandler(b)
	req := httptest.NewRequest(http.MethodGet, "/lookup?topic=topic-0500", nil)
	w := &discardResponse{h: make(http.Header)}
	h.ServeHTTP(w, req)
	if w.code != http.StatusOK {
		b.Fatalf("status %d", w.code)
	}
	b.SetBytes(int64(w.n))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		clear(w.h)
		h.ServeHTTP(w, req)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkLookupParallel is BenchmarkLookup from GOMAXPROCS goroutines:
// readers share the DB's read lock.
func BenchmarkLookupParallel(b *testing.B) {
	h := benchHandler(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := httptest.NewRequest(http.MethodGet, "/lookup?topic=topic-0500", nil)
		w := &discardResponse{h: make(http.Header)}
		for pb.Next() {
			clear(w.h)
			h.ServeHTTP(w, req)
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkTopics measures GET /topics, which lists all 1,000 topics.
func BenchmarkTopics(b *testing.B) {
	h := benchHandler(b)
	req := httptest.NewRequest(http.MethodGet, "/topics", nil)
	w := &discardResponse{h: make(http.Header)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		clear(w.h)
		h.ServeHTTP(w, req)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}
