package main

import (
	"image/color"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// writeChart draws the latency distribution of every row that is compared
// with a floor row, as horizontal box plots, the backend (blue) beside its
// floor (grey), on a log scale, into path (PNG).
func writeChart(rep *report, path string) error {
	byName := map[string]*row{}
	for _, r := range rep.Rows {
		byName[r.Name] = r
	}
	p := plot.New()
	p.Title.Text = "Latency per operation: backend (blue) beside its floor (grey), " + rep.Date
	p.X.Label.Text = "milliseconds (log scale)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	var names []string
	y := 0.0
	box := func(r *row, fill color.Color) error {
		vals := make(plotter.Values, 0, len(r.Samples))
		for _, v := range r.Samples {
			vals = append(vals, max(v, 0.1)) // a log scale has no zero
		}
		b, err := plotter.NewBoxPlot(vg.Points(9), y, vals)
		if err != nil {
			return err
		}
		b.Horizontal = true
		b.FillColor = fill
		p.Add(b)
		name := r.Name
		if len(name) > 58 {
			name = name[:57] + "…"
		}
		names = append(names, name)
		y++
		return nil
	}
	blue, grey := color.RGBA{R: 80, G: 130, B: 210, A: 255}, color.RGBA{R: 190, G: 190, B: 190, A: 255}
	for i := len(rep.Rows) - 1; i >= 0; i-- {
		r := rep.Rows[i]
		ref := byName[r.Floor]
		if ref == nil || len(r.Samples) < 2 || len(ref.Samples) < 2 || strings.HasPrefix(r.Name, "floor:") {
			continue
		}
		if err := box(ref, grey); err != nil {
			return err
		}
		if err := box(r, blue); err != nil {
			return err
		}
	}
	p.NominalY(names...)
	return p.Save(30*vg.Centimeter, vg.Length(len(names))*0.75*vg.Centimeter+4*vg.Centimeter, path)
}
