package lookupd

import (
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/internal/version"
)

// lookupdGauges scrapes /metrics, parses it with the Prometheus text
// parser and returns every gauge sample as name{label values} → value.
func lookupdGauges(t *testing.T, l *LOOKUPD) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + l.HTTPAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		if f.GetType() != dto.MetricType_GAUGE {
			continue
		}
		for _, m := range f.Metric {
			key := name
			for _, lp := range m.Label {
				key += "{" + lp.GetValue() + "}"
			}
			out[key] = m.Gauge.GetValue()
		}
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics")
	}
	return out
}

func TestLookupdMetrics(t *testing.T) {
	l := startLookupd(t, nil)
	a := dialV1(t, l)
	a.identify(4151)
	for _, cmd := range []string{"REGISTER t1 c1", "REGISTER t1 c2"} {
		if r := a.cmd(cmd); r != "OK" {
			t.Fatalf("%s: %s", cmd, r)
		}
	}
	b := dialV1(t, l)
	b.identify(4152)
	for _, cmd := range []string{"REGISTER t1", "REGISTER t2 ch"} {
		if r := b.cmd(cmd); r != "OK" {
			t.Fatalf("%s: %s", cmd, r)
		}
	}
	if code, _, body := httpDo(t, l, http.MethodPost, "/topic/create?topic=t3"); code != http.StatusOK {
		t.Fatalf("topic/create: %d %s", code, body)
	}

	g := lookupdGauges(t, l)
	for k, want := range map[string]float64{
		"nsq_lookupd_producers":                     2,
		"nsq_lookupd_registrations{topic}":          3,
		"nsq_lookupd_registrations{channel}":        3,
		"nsq_lookupd_topic_producers{t1}":           2,
		"nsq_lookupd_topic_producers{t2}":           1,
		"nsq_lookupd_topic_producers{t3}":           0,
		"nsq_lookupd_topic_channels{t1}":            2,
		"nsq_lookupd_topic_channels{t2}":            1,
		"nsq_lookupd_topic_channels{t3}":            0,
		"nsq_lookupd_info{" + version.Version + "}": 1,
	} {
		if got, ok := g[k]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
		}
	}

	// A disconnected nsqd stops being a producer.
	b.conn.Close()
	testutil.WaitFor(t, "producer gone", 5*time.Second, func() bool {
		return lookupdGauges(t, l)["nsq_lookupd_producers"] == 1
	})
	if got := lookupdGauges(t, l)["nsq_lookupd_topic_producers{t1}"]; got != 1 {
		t.Errorf("t1 producers after disconnect = %v, want 1", got)
	}
}
