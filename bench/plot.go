package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The chart: three panels side by side, each a grouped bar chart with one
// group per program and one bar per policy: dispatch time (median), total
// time with the final Synchronize (median), and host waits per iteration
// with the program's HSA↔HIP crossings marked. Time panels use a log scale
// when their range is wide. The legend and the run's description sit in a
// column on the right.

const (
	plotPanelW  = 13 * vg.Centimeter
	plotLegendW = 6 * vg.Centimeter
	plotH       = 12 * vg.Centimeter
	plotDPI     = 144
)

// writePlot draws the results to a PNG file.
func writePlot(path string, cfg config, rs []result) error {
	if len(rs) == 0 {
		return fmt.Errorf("no results to plot")
	}
	progs, pols := axes(rs)
	value := func(prog, pol string, f func(result) float64) float64 {
		for _, r := range rs {
			if r.Program == prog && r.tablePolicy() == pol {
				return f(r)
			}
		}
		return math.NaN()
	}
	panels := []struct {
		title, label string
		f            func(result) float64
		time         bool
	}{
		{"Dispatch time (host, before Synchronize)", "median µs per iteration", func(r result) float64 { return r.DispatchMedianUS }, true},
		{"Total time (with the final Synchronize)", "median µs per iteration", func(r result) float64 { return r.TotalMedianUS }, true},
		{"Host waits per iteration", "host waits (dashed: HSA↔HIP crossings)", func(r result) float64 { return r.HostWaitsPerIter }, false},
	}

	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font.Size = vg.Points(11)
	legend.ThumbnailWidth = vg.Centimeter

	// Bars are sized in canvas units: share a group's width (70% of a
	// category) among the policies.
	barW := plotPanelW * 0.8 / vg.Length(len(progs)) * 0.7 / vg.Length(len(pols))
	var row []*plot.Plot
	for pi, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.Title.TextStyle.Font.Size = vg.Points(12)
		p.X.Label.Text = "program"
		p.Y.Label.Text = pn.label
		p.NominalX(progs...)
		p.Y.Tick.Label.Font.Size = vg.Points(9)
		p.X.Tick.Label.Font.Size = vg.Points(10)
		p.Add(plotter.NewGrid())

		vals := make([][]float64, len(pols))
		for j, pol := range pols {
			for _, prog := range progs {
				vals[j] = append(vals[j], value(prog, pol, pn.f))
			}
		}
		var tr axisTransform
		if pn.time {
			tr = newLogAxis(slices.Concat(vals...))
		} else {
			tr = newCountAxis(pols, vals, rs)
		}
		for j, pol := range pols {
			hs := make(plotter.Values, len(progs))
			for i, v := range vals[j] {
				hs[i] = tr.bar(v)
			}
			bars, err := plotter.NewBarChart(hs, barW)
			if err != nil {
				return err
			}
			bars.Color = plotutil.Color(j)
			bars.LineStyle.Width = vg.Points(0.5)
			bars.Offset = barW * (vg.Length(j) - vg.Length(len(pols)-1)/2)
			p.Add(bars)
			if pi == 0 {
				legend.Add(pol, bars)
			}
		}
		if !pn.time {
			if err := addCrossings(p, progs, rs, pi == len(panels)-1, &legend); err != nil {
				return err
			}
			if err := labelClipped(p, tr.(countAxis), vals, barW, len(pols)); err != nil {
				return err
			}
		}
		tr.configure(p)
		row = append(row, p)
	}

	img := vgimg.NewWith(vgimg.UseWH(plotPanelW*vg.Length(len(row))+plotLegendW, plotH), vgimg.UseDPI(plotDPI))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	panelsArea := draw.Crop(dc, 0, -plotLegendW, 0, 0)
	tiles := draw.Tiles{Rows: 1, Cols: len(row), PadX: vg.Centimeter / 2, PadY: vg.Centimeter / 3,
		PadTop: vg.Centimeter / 4, PadBottom: vg.Centimeter / 4, PadLeft: vg.Centimeter / 4}
	cs := plot.Align([][]*plot.Plot{row}, tiles, panelsArea)
	for i, p := range row {
		p.Draw(cs[0][i])
	}
	side := draw.Crop(dc, plotPanelW*vg.Length(len(row))+vg.Centimeter/3, 0, vg.Centimeter, -vg.Centimeter)
	legend.Draw(side)
	drawCaption(side, cfg, rs, len(pols)+1)

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// axes lists the programs and policies in the order they were run.
func axes(rs []result) (progs, pols []string) {
	for _, r := range rs {
		if !slices.Contains(progs, r.Program) {
			progs = append(progs, r.Program)
		}
		if !slices.Contains(pols, r.tablePolicy()) {
			pols = append(pols, r.tablePolicy())
		}
	}
	return progs, pols
}

// addCrossings marks each program's HSA↔HIP crossings per iteration as a
// dashed line across its group.
func addCrossings(p *plot.Plot, progs []string, rs []result, inLegend bool, legend *plot.Legend) error {
	for i, prog := range progs {
		c := -1
		for _, r := range rs {
			if r.Program == prog {
				c = r.Crossings
			}
		}
		if c < 0 {
			continue
		}
		l, err := plotter.NewLine(plotter.XYs{{X: float64(i) - 0.45, Y: float64(c)}, {X: float64(i) + 0.45, Y: float64(c)}})
		if err != nil {
			return err
		}
		l.Color = color.Black
		l.Width = vg.Points(1.5)
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		p.Add(l)
		if inLegend && i == 0 {
			legend.Add("HSA↔HIP crossings/it", l)
		}
	}
	return nil
}

// drawCaption writes what was run under the legend.
func drawCaption(c draw.Canvas, cfg config, rs []result, legendLines int) {
	f := plot.DefaultFont
	f.Size = vg.Points(9)
	sty := draw.TextStyle{Color: color.Black, Font: f, Handler: plot.DefaultTextHandler}
	dev := rs[0].Backend
	lines := []string{"backend: " + dev}
	if dev == "emulator" {
		delay := "off"
		if cfg.emuDelay > 0 {
			delay = "≤ " + cfg.emuDelay.String() + " per op"
		}
		lines = append(lines, "emulated device delay: "+delay)
	}
	lines = append(lines,
		fmt.Sprintf("matmul, elementwise, mixed: %d×%d", cfg.n, cfg.n),
		fmt.Sprintf("mixed: repeat %d", cfg.repeat),
		fmt.Sprintf("mlp: batch %d, %d→%d→%d", cfg.mlp.batch, cfg.mlp.in, cfg.mlp.hidden, cfg.mlp.out),
		"float32",
		fmt.Sprintf("%d iterations per bar", cfg.iters),
		fmt.Sprintf("(%d warm-up excluded)", cfg.warmup),
	)
	step := sty.Font.Size * 1.6
	y := c.Max.Y - vg.Length(legendLines+1)*vg.Points(11)*1.7
	for _, l := range lines {
		c.FillText(sty, vg.Point{X: c.Min.X, Y: y}, l)
		y -= step
	}
}

// axisTransform maps values to bar heights and sets up the value axis.
type axisTransform interface {
	bar(v float64) float64
	configure(p *plot.Plot)
}

// countAxis is a linear axis from 0 for counts. WaitAlways waits after
// every op, dozens of times per mlp iteration, which would flatten the
// other policies' bars: the axis stops a little above the other policies'
// counts and the crossings, and taller bars are cut and labelled.
type countAxis struct{ max float64 }

func newCountAxis(pols []string, vals [][]float64, rs []result) countAxis {
	top := 1.0
	for _, r := range rs {
		top = max(top, float64(r.Crossings))
	}
	for j, pol := range pols {
		if pol == "WaitAlways" {
			continue
		}
		for _, v := range vals[j] {
			if !math.IsNaN(v) {
				top = max(top, v)
			}
		}
	}
	return countAxis{max: math.Ceil(top*1.5 + 0.5)}
}

func (countAxis) bar(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

func (a countAxis) configure(p *plot.Plot) {
	p.Y.Min, p.Y.Max = 0, a.max
	p.Y.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		ts := plot.DefaultTicks{}.Ticks(lo, hi)
		for i := range ts {
			if ts[i].Label != "" {
				ts[i].Label = strconv.FormatFloat(ts[i].Value, 'g', 4, 64)
			}
		}
		return ts
	})
}

// labelClipped writes the value on each bar that the axis cuts off.
func labelClipped(p *plot.Plot, a countAxis, vals [][]float64, barW vg.Length, npol int) error {
	for j := range vals {
		for i, v := range vals[j] {
			if !(v > a.max) {
				continue
			}
			ls, err := plotter.NewLabels(plotter.XYLabels{
				XYs:    plotter.XYs{{X: float64(i), Y: a.max}},
				Labels: []string{strconv.FormatFloat(v, 'g', 4, 64) + " ↑"},
			})
			if err != nil {
				return err
			}
			ls.TextStyle[0].XAlign, ls.TextStyle[0].YAlign = draw.XCenter, draw.YTop
			ls.TextStyle[0].Font.Size = vg.Points(9)
			ls.Offset = vg.Point{X: barW * (vg.Length(j) - vg.Length(npol-1)/2), Y: -vg.Points(3)}
			p.Add(ls)
		}
	}
	return nil
}

// logAxis draws bars of height log10(v) above a floor decade, with ticks
// labelled in µs and ms: gonum's LogScale cannot draw bars, which start at
// zero. When the values span less than a factor of 30 it is linear.
type logAxis struct {
	on          bool
	floor, ceil float64 // decades, log10(µs)
}

func newLogAxis(vs []float64) logAxis {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		if v > 0 && !math.IsNaN(v) {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if math.IsInf(lo, 1) || hi/lo <= 30 {
		return logAxis{}
	}
	return logAxis{on: true, floor: math.Floor(math.Log10(lo)), ceil: math.Ceil(math.Log10(hi) + 0.05)}
}

func (a logAxis) bar(v float64) float64 {
	if math.IsNaN(v) || v <= 0 {
		return 0
	}
	if !a.on {
		return v
	}
	return math.Max(math.Log10(v)-a.floor, 0)
}

func (a logAxis) configure(p *plot.Plot) {
	p.Y.Min = 0
	if !a.on {
		return
	}
	p.Y.Label.Text += " (log scale)"
	p.Y.Max = a.ceil - a.floor
	p.Y.Tick.Marker = a
}

// Ticks implements plot.Ticker: a labelled tick per decade, minor ticks
// at 2…9 times it.
func (a logAxis) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for k := math.Floor(lo); k <= hi; k++ {
		if k >= lo {
			ts = append(ts, plot.Tick{Value: k, Label: microLabel(math.Pow(10, k+a.floor))})
		}
		for m := 2.0; m < 10; m++ {
			if v := k + math.Log10(m); v >= lo && v <= hi {
				ts = append(ts, plot.Tick{Value: v})
			}
		}
	}
	return ts
}

// microLabel formats a duration given in µs.
func microLabel(us float64) string {
	switch {
	case us >= 1e6:
		return strconv.FormatFloat(us/1e6, 'g', 3, 64) + " s"
	case us >= 1e3:
		return strconv.FormatFloat(us/1e3, 'g', 3, 64) + " ms"
	}
	return strconv.FormatFloat(us, 'g', 3, 64) + " µs"
}
