// Package plot draws the benchmarks' line charts as PNG files (gonum.org/v1/plot) and writes
// the CSV each chart is drawn from, so every figure has its numbers beside it.
package plot

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"os"
	"strconv"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Series is one line: a name and its points.
type Series struct {
	Name string
	X, Y []float64
}

// Chart is one figure.
type Chart struct {
	Title, XLabel, YLabel string
	LogY                  bool
	Series                []Series
	Marks                 []Mark // vertical lines, e.g. when a node was killed
}

// Mark is a labelled vertical line at X.
type Mark struct {
	X     float64
	Label string
}

var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xd6, 0x27, 0x28, 0xff},
	color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, color.RGBA{0xff, 0x7f, 0x0e, 0xff},
	color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	color.RGBA{0xe3, 0x77, 0xc2, 0xff}, color.RGBA{0x7f, 0x7f, 0x7f, 0xff},
}

// Save draws c into path (PNG, 8x5 inches).
func (c Chart) Save(path string) error {
	p := gplot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = c.Title, c.XLabel, c.YLabel
	p.Add(plotter.NewGrid())
	if c.LogY {
		p.Y.Scale = gplot.LogScale{}
		p.Y.Tick.Marker = gplot.LogTicks{Prec: -1}
	}
	ymax := 0.0
	for i, s := range c.Series {
		pts := make(plotter.XYs, len(s.X))
		for j := range s.X {
			pts[j].X, pts[j].Y = s.X[j], s.Y[j]
			ymax = max(ymax, s.Y[j])
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("plot: %s: %w", s.Name, err)
		}
		col := palette[i%len(palette)]
		l.Color, sc.Color = col, col
		sc.Shape = draw.CircleGlyph{}
		sc.Radius = vg.Points(2)
		p.Add(l, sc)
		p.Legend.Add(s.Name, l, sc)
	}
	for _, m := range c.Marks {
		l, err := plotter.NewLine(plotter.XYs{{X: m.X, Y: 0}, {X: m.X, Y: ymax}})
		if err != nil {
			return err
		}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		l.Color = color.Gray{0x60}
		p.Add(l)
		lb, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: m.X, Y: ymax}}, Labels: []string{m.Label}})
		if err == nil {
			p.Add(lb)
		}
	}
	p.Legend.Top = true
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot: save %s: %w", path, err)
	}
	return nil
}

// WriteCSV writes header and rows to path.
func WriteCSV(path string, header []string, rows [][]float64) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	defer f.Close()
	w := csv.NewWriter(f)
	w.Write(header)
	for _, r := range rows {
		rec := make([]string, len(r))
		for i, v := range r {
			rec[i] = strconv.FormatFloat(v, 'g', 6, 64)
		}
		w.Write(rec)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return fmt.Errorf("plot: write %s: %w", path, err)
	}
	return f.Close()
}
