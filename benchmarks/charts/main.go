// Command charts draws the PNG figures of `make bench` from the CSV files the benchmarks
// wrote under benchmarks/out (those the cluster benchmark draws itself are not redrawn).
// A CSV that is missing is skipped with a note, so one benchmark can be rerun alone.
package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"idunno/benchmarks/plot"
)

func main() {
	out := flag.String("out", "benchmarks/out", "directory holding the CSV files")
	flag.Parse()
	for _, c := range []struct {
		csv, png string
		draw     func(rows []map[string]string) plot.Chart
	}{
		{"kernel.csv", "kernel.png", kernelChart},
		{"http.csv", "latency_throughput.png", latencyChart},
	} {
		rows, err := readCSV(filepath.Join(*out, c.csv))
		if c.csv == "http.csv" && err == nil {
			// A second run of the HTTP benchmark with a smaller max batch, if make bench made one.
			if more, err := readCSV(filepath.Join(*out, "http_b4.csv")); err == nil {
				for _, r := range more {
					if r["run"] == "batched" {
						r["run"] = "batched, max batch 4"
						rows = append(rows, r)
					}
				}
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "charts: skipping %s: %v\n", c.png, err)
			continue
		}
		if err := c.draw(rows).Save(filepath.Join(*out, c.png)); err != nil {
			fmt.Fprintln(os.Stderr, "charts:", err)
			os.Exit(1)
		}
		fmt.Println("wrote", filepath.Join(*out, c.png))
	}
}

func readCSV(path string) ([]map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil || len(recs) < 2 {
		return nil, fmt.Errorf("%s: no rows (%v)", path, err)
	}
	var rows []map[string]string
	for _, r := range recs[1:] {
		m := map[string]string{}
		for i, h := range recs[0] {
			if i < len(r) {
				m[h] = r[i]
			}
		}
		rows = append(rows, m)
	}
	return rows, nil
}

func num(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64)
	return v
}

// group collects (x, y) points into one series per value of the key column, in first-seen order.
func group(rows []map[string]string, key, x, y, prefix string) []plot.Series {
	idx := map[string]int{}
	var ss []plot.Series
	for _, r := range rows {
		k := r[key]
		i, ok := idx[k]
		if !ok {
			i = len(ss)
			idx[k] = i
			ss = append(ss, plot.Series{Name: prefix + k})
		}
		ss[i].X = append(ss[i].X, num(r[x]))
		ss[i].Y = append(ss[i].Y, num(r[y]))
	}
	return ss
}

// kernelChart: images/s against batch size, one line per model (log scale: models differ 1000x).
func kernelChart(rows []map[string]string) plot.Chart {
	for _, r := range rows { // one line per model and precision (kernel.csv before precisions: fp32)
		p := r["precision"]
		if p == "" {
			p = "fp32"
		}
		r["series"] = r["model"] + " " + p
	}
	return plot.Chart{Title: "Kernel throughput (idunno bench kernel, 2 threads)", XLabel: "batch size",
		YLabel: "images/s (log)", LogY: true, Series: group(rows, "series", "batch", "images_per_sec", "")}
}

// latencyChart: offered load against p50 and p99 latency, one pair of lines per batching
// configuration ("plain" is no batching, "batched" the benchmark's default max batch).
func latencyChart(rows []map[string]string) plot.Chart {
	var load []map[string]string
	for _, r := range rows {
		if r["offered_rps"] != "" && num(r["offered_rps"]) > 0 {
			load = append(load, r)
		}
	}
	p50 := group(load, "run", "offered_rps", "p50_ms", "p50 ")
	p99 := group(load, "run", "offered_rps", "p99_ms", "p99 ")
	return plot.Chart{Title: "Inference endpoint: latency against offered load", XLabel: "offered requests/s",
		YLabel: "latency (ms, log)", LogY: true, Series: append(p50, p99...)}
}
