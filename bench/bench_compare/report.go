package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// results collects samples per scenario, metric and daemon, keeping
// metrics in the order they were first reported.
type results struct {
	daemons []string // column order
	rows    []rowKey
	values  map[rowKey]map[string][]float64
}

type rowKey struct{ scenario, metric string }

func newResults(daemons []string) *results {
	return &results{daemons: daemons, values: map[rowKey]map[string][]float64{}}
}

func (r *results) add(scenario, daemon string, samples []sample) {
	for _, s := range samples {
		k := rowKey{scenario, s.metric}
		if r.values[k] == nil {
			r.values[k] = map[string][]float64{}
			r.rows = append(r.rows, k)
		}
		r.values[k][daemon] = append(r.values[k][daemon], s.value)
	}
}

// write prints a Markdown table: per scenario and metric, each daemon's
// median and range, and the ratio of the last daemon's median to the
// first's when there are two.
func (r *results) write(w io.Writer) {
	header := []string{"scenario", "metric"}
	for _, d := range r.daemons {
		header = append(header, d+" median (range)")
	}
	compare := len(r.daemons) == 2
	if compare {
		header = append(header, r.daemons[1]+" / "+r.daemons[0])
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(header, " | "))
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(header)))
	for _, k := range r.rows {
		cells := []string{k.scenario, k.metric}
		var medians []float64
		for _, d := range r.daemons {
			vs := r.values[k][d]
			if len(vs) == 0 {
				cells = append(cells, "–")
				medians = append(medians, 0)
				continue
			}
			m := median(vs)
			medians = append(medians, m)
			cells = append(cells, fmt.Sprintf("%s (%s–%s)", formatNum(m), formatNum(slices.Min(vs)), formatNum(slices.Max(vs))))
		}
		if compare {
			ratio := "–"
			if medians[0] != 0 {
				ratio = fmt.Sprintf("%.2f", medians[1]/medians[0])
			}
			cells = append(cells, ratio)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
}

// median of vs (which it does not modify); 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// formatNum prints rates in thousands and small figures with two or three
// significant digits.
func formatNum(v float64) string {
	switch a := max(v, -v); {
	case a >= 10000:
		return fmt.Sprintf("%.0fk", v/1000)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
