package main

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// soakMeasure is one chart: one measure of the samples over time, a line
// per server.
type soakMeasure struct {
	file, title, unit string
	counts            bool // whole numbers: no fractional ticks
	value             func(*soakSample) (float64, bool)
}

func soakMeasures() []soakMeasure {
	inMiB := func(b int64) (float64, bool) { return float64(b) / (1 << 20), true }
	count := func(n int64) (float64, bool) { return float64(n), true }
	return []soakMeasure{
		{"db-size.png", "Database file size", "MiB", false, func(s *soakSample) (float64, bool) { return inMiB(s.DBBytes) }},
		{"wal-size.png", "WAL size", "MiB", false, func(s *soakSample) (float64, bool) { return inMiB(s.WALBytes) }},
		{"list-p99.png", "Paginated list (pages of 500), p99 per sample", "ms", false, func(s *soakSample) (float64, bool) { return deref(s.ListP99ms) }},
		{"write-p99.png", "Write latency, p99 per sample", "ms", false, func(s *soakSample) (float64, bool) { return deref(s.WriteP99ms) }},
		{"compaction-pause.png", "Longest write during each compaction", "ms", false, func(s *soakSample) (float64, bool) { return deref(s.CompactPauseMs) }},
		{"watch-missed.png", "Watch events missed (cumulative)", "events", true, func(s *soakSample) (float64, bool) { return count(s.Missed) }},
		{"errors.png", "Errors (cumulative)", "errors", true, func(s *soakSample) (float64, bool) { return count(s.Errors) }},
		{"rss.png", "Server resident memory (VmRSS)", "MiB", false, func(s *soakSample) (float64, bool) { return inMiB(s.RSSBytes) }},
	}
}

// drawSoakCharts writes one PNG per measure into dir.
func drawSoakCharts(dir string, samples []soakSample, servers []string) error {
	for _, m := range soakMeasures() {
		var series []chartSeries
		for _, name := range servers {
			cs := chartSeries{name: name, color: serverColor(name)}
			for i := range samples {
				if samples[i].Server != name {
					continue
				}
				if v, ok := m.value(&samples[i]); ok {
					cs.points = append(cs.points, chartPoint{samples[i].Minutes, v})
				}
			}
			series = append(series, cs)
		}
		img := drawChart(m.title, "minutes", m.unit, m.counts, series)
		if err := writePNG(filepath.Join(dir, m.file), img); err != nil {
			return err
		}
	}
	return nil
}

func writePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create chart: %w", err)
	}
	if err := errors.Join(png.Encode(f, img), f.Close()); err != nil {
		return fmt.Errorf("write chart %s: %w", path, err)
	}
	return nil
}

type chartSeries struct {
	name   string
	color  color.RGBA
	points []chartPoint
}

type chartPoint struct{ x, y float64 }

// serverColor keeps each server's colour the same on every chart.
func serverColor(name string) color.RGBA {
	switch name {
	case soakEtcd:
		return color.RGBA{31, 119, 180, 255} // blue
	case soakKite:
		return color.RGBA{230, 110, 0, 255} // orange
	}
	return color.RGBA{90, 90, 90, 255}
}

const chartW, chartH = 960, 540

// drawChart draws the series as lines with a marker at each sample, on
// axes from 0 that fit every point, with grid, title, axis labels and a
// legend. Each series is drawn thinner than the one before, so that where
// two servers measured the same the first still shows around the second.
func drawChart(title, xLabel, yLabel string, counts bool, series []chartSeries) *image.RGBA {
	black, grid := color.RGBA{0, 0, 0, 255}, color.RGBA{225, 225, 225, 255}
	img := image.NewRGBA(image.Rect(0, 0, chartW, chartH))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	plot := image.Rect(100, 60, chartW-30, chartH-70)

	var xMax, yMax float64
	for _, s := range series {
		for _, p := range s.points {
			xMax, yMax = max(xMax, p.x), max(yMax, p.y)
		}
	}
	xStep, xTop := niceAxis(xMax)
	yStep, yTop := niceAxis(yMax)
	if counts && yStep < 1 {
		yStep, yTop = 1, max(1, math.Ceil(yMax))
	}
	px := func(x float64) int { return plot.Min.X + int(math.Round(x/xTop*float64(plot.Dx()))) }
	py := func(y float64) int { return plot.Max.Y - int(math.Round(y/yTop*float64(plot.Dy()))) }

	for i := 0; float64(i)*yStep <= yTop*1.0001; i++ {
		v := float64(i) * yStep
		y := py(v)
		fillRect(img, image.Rect(plot.Min.X, y, plot.Max.X, y+1), grid)
		label := tickLabel(v, yStep)
		w, _ := textSize(label, 1)
		drawText(img, label, plot.Min.X-8-w, y-7, 1, false, black)
	}
	for i := 0; float64(i)*xStep <= xTop*1.0001; i++ {
		v := float64(i) * xStep
		x := px(v)
		fillRect(img, image.Rect(x, plot.Min.Y, x+1, plot.Max.Y), grid)
		label := tickLabel(v, xStep)
		w, _ := textSize(label, 1)
		drawText(img, label, x-w/2, plot.Max.Y+8, 1, false, black)
	}
	strokeRect(img, plot, black)

	for k, s := range series {
		width := lineWidth(k, len(series))
		for i, p := range s.points {
			x, y := px(p.x), py(p.y)
			if i > 0 {
				q := s.points[i-1]
				drawLine(img, px(q.x), py(q.y), x, y, width, s.color)
			}
			fillRect(img, image.Rect(x-width, y-width, x+width+1, y+width+1), s.color)
		}
	}

	w, _ := textSize(title, 2)
	drawText(img, title, (chartW-w)/2, 14, 2, false, black)
	w, _ = textSize(xLabel, 1)
	drawText(img, xLabel, plot.Min.X+(plot.Dx()-w)/2, plot.Max.Y+32, 1, false, black)
	w, _ = textSize(yLabel, 1)
	drawText(img, yLabel, 30, plot.Min.Y+(plot.Dy()-w)/2, 1, true, black)
	drawLegend(img, plot, series)
	return img
}

// drawLegend boxes each series' colour and name in the plot's top left.
func drawLegend(img *image.RGBA, plot image.Rectangle, series []chartSeries) {
	width := 0
	for _, s := range series {
		w, _ := textSize(s.name, 1)
		width = max(width, w)
	}
	box := image.Rect(plot.Min.X+10, plot.Min.Y+10, plot.Min.X+10+width+50, plot.Min.Y+10+len(series)*18+8)
	fillRect(img, box, color.RGBA{255, 255, 255, 255})
	strokeRect(img, box, color.RGBA{150, 150, 150, 255})
	for i, s := range series {
		y := box.Min.Y + 13 + i*18
		w := lineWidth(i, len(series))
		fillRect(img, image.Rect(box.Min.X+8, y-w/2, box.Min.X+32, y-w/2+w), s.color)
		drawText(img, s.name, box.Min.X+40, y-7, 1, false, color.RGBA{0, 0, 0, 255})
	}
}

// lineWidth is the width of series k of n: 2 pixels for the last, 2 more
// for each before it.
func lineWidth(k, n int) int { return 2 * (n - k) }

// niceAxis returns a step of 1, 2 or 5 times a power of ten that divides
// 0..v into at most about 5 intervals, and the multiple of it at or above
// v (or within 1% below it: the last sample is taken a moment after the
// run's end, which should not add an empty interval to the time axis).
func niceAxis(v float64) (step, top float64) {
	if v <= 0 || math.IsNaN(v) {
		v = 1
	}
	raw := v / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step = 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if raw <= m*mag {
			step = m * mag
			break
		}
	}
	return step, max(1, math.Ceil(v/step-0.01)) * step
}

// tickLabel prints v with as many decimals as the step needs.
func tickLabel(v, step float64) string {
	decimals := 0
	if step < 1 {
		decimals = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

func fillRect(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

func strokeRect(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	fillRect(img, image.Rect(r.Min.X, r.Min.Y, r.Max.X+1, r.Min.Y+1), c)
	fillRect(img, image.Rect(r.Min.X, r.Max.Y, r.Max.X+1, r.Max.Y+1), c)
	fillRect(img, image.Rect(r.Min.X, r.Min.Y, r.Min.X+1, r.Max.Y+1), c)
	fillRect(img, image.Rect(r.Max.X, r.Min.Y, r.Max.X+1, r.Max.Y+1), c)
}

// drawLine draws a line width pixels wide (Bresenham's algorithm).
func drawLine(img *image.RGBA, x0, y0, x1, y1, width int, c color.RGBA) {
	dx, dy := absInt(x1-x0), -absInt(y1-y0)
	sx, sy := signInt(x1-x0), signInt(y1-y0)
	e := dx + dy
	for {
		fillRect(img, image.Rect(x0-width/2, y0-width/2, x0-width/2+width, y0-width/2+width), c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func absInt(v int) int { return max(v, -v) }

func signInt(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}

// textSize is the size of s drawn at scale (basicfont's 7x13 pixels per
// character, each pixel scale × scale).
func textSize(s string, scale int) (w, h int) {
	face := basicfont.Face7x13
	return font.MeasureString(face, s).Ceil() * scale, face.Height * scale
}

// drawText draws s with its top left corner at (x, y), each font pixel
// scaled to a square of scale pixels; vertical turns it a quarter to the
// left, to be read bottom to top (a y-axis label), with (x, y) then the
// top left of the turned text.
func drawText(img *image.RGBA, s string, x, y, scale int, vertical bool, c color.RGBA) {
	face := basicfont.Face7x13
	w, h := textSize(s, 1)
	mask := image.NewAlpha(image.Rect(0, 0, w, h))
	d := font.Drawer{Dst: mask, Src: image.Opaque, Face: face, Dot: fixed.P(0, face.Ascent)}
	d.DrawString(s)
	for my := range h {
		for mx := range w {
			if mask.AlphaAt(mx, my).A == 0 {
				continue
			}
			u, v := mx*scale, my*scale
			r := image.Rect(x+u, y+v, x+u+scale, y+v+scale)
			if vertical {
				r = image.Rect(x+v, y+w*scale-u-scale, x+v+scale, y+w*scale-u)
			}
			fillRect(img, r, c)
		}
	}
}
