package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// A Point is one measurement of a scaling curve: Y at size X.
type Point struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
}

// A Curve is how one cost grows with one size (trainers, slots, jobs,
// params): its points, and Slope, the least-squares slope of log Y on
// log X (1: linear, 0: flat, 2: quadratic). The scaling section
// (ScalingSection) measures each point in a bounded time; absolute values
// are noisy on a shared machine, the slope and the ratio last/first are
// what to read.
type Curve struct {
	// Name is the file-safe name of the curve ("sync-step-vs-trainers").
	Name   string  `json:"name"`
	Title  string  `json:"title"`
	XLabel string  `json:"x"`
	YLabel string  `json:"y"`
	Points []Point `json:"points"`
	Slope  float64 `json:"slope"`
	// Expect is the slope the design predicts, with why.
	Expect string `json:"expect"`
	Note   string `json:"note,omitempty"`
	// Plot is the SVG's path relative to the results file, once saved.
	Plot string `json:"plot,omitempty"`
}

// Superlinear is the slope above which a curve grows faster than linearly
// (a slope fitted on a few noisy points: 1.15, not 1.0).
const Superlinear = 1.15

// LogLogSlope is the least-squares slope of log y on log x over the points
// with x > 0 and y > 0; NaN if fewer than two such points (or all x equal).
func LogLogSlope(pts []Point) float64 {
	var n, sx, sy, sxx, sxy float64
	for _, p := range pts {
		if !(p.X > 0) || !(p.Y > 0) {
			continue
		}
		x, y := math.Log(p.X), math.Log(p.Y)
		n++
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	d := n*sxx - sx*sx
	if n < 2 || d == 0 {
		return math.NaN()
	}
	return (n*sxy - sx*sy) / d
}

// fit sets c.Slope from c.Points.
func (c *Curve) fit() { c.Slope = LogLogSlope(c.Points) }

// Growth is Y at the last point over Y at the first.
func (c *Curve) Growth() float64 {
	if len(c.Points) < 2 || c.Points[0].Y == 0 {
		return math.NaN()
	}
	return c.Points[len(c.Points)-1].Y / c.Points[0].Y
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// scalingSection measures every scaling curve (scaling_*.go) into
// rep.Curves; a curve that fails leaves a note.
func (r *runner) scalingSection(ctx context.Context, tmp string) {
	for _, m := range scalingMeasures(r.cfg.Quick) {
		if ctx.Err() != nil {
			return
		}
		t0 := time.Now()
		r.logf("scaling: %s", m.name)
		dir, err := os.MkdirTemp(tmp, "scaling-")
		if err != nil {
			r.note(fmt.Sprintf("scaling %s: %v", m.name, err))
			continue
		}
		cs, err := m.run(ctx, dir, r.logf)
		os.RemoveAll(dir)
		if err != nil {
			r.note(fmt.Sprintf("scaling %s: %v", m.name, err))
		}
		for i := range cs {
			cs[i].fit()
			r.logf("scaling: %-36s slope %.2f  growth %.3gx over %v", cs[i].Name, cs[i].Slope, cs[i].Growth(), cs[i].Points)
		}
		r.rep.Curves = append(r.rep.Curves, cs...)
		r.logf("scaling: %s took %v", m.name, time.Since(t0).Round(time.Millisecond))
	}
}

// A scalingMeasure measures one or more curves in dir.
type scalingMeasure struct {
	name string
	run  func(ctx context.Context, dir string, logf func(string, ...any)) ([]Curve, error)
}

func scalingMeasures(quick bool) []scalingMeasure {
	return []scalingMeasure{
		{"pserver sync step vs trainers", func(ctx context.Context, _ string, logf func(string, ...any)) ([]Curve, error) {
			return syncStepVsTrainers(ctx, quick)
		}},
		{"pserver sync step vs slots", func(ctx context.Context, _ string, logf func(string, ...any)) ([]Curve, error) {
			return syncStepVsSlots(ctx, quick)
		}},
		{"master tasks vs trainers", func(ctx context.Context, dir string, logf func(string, ...any)) ([]Curve, error) {
			return masterVsTrainers(ctx, dir, quick)
		}},
		{"memory per object", func(ctx context.Context, dir string, logf func(string, ...any)) ([]Curve, error) {
			return memoryCurves(ctx, dir, quick)
		}},
		{"metadata writes vs jobs", func(ctx context.Context, dir string, logf func(string, ...any)) ([]Curve, error) {
			return metadataVsJobs(ctx, dir, quick)
		}},
		{"checkpoint vs params", func(ctx context.Context, dir string, logf func(string, ...any)) ([]Curve, error) {
			return checkpointVsParams(ctx, dir, quick)
		}},
	}
}

// writeScaling writes the scaling section of the results file: one table
// row per curve with its slope and a link to its plot.
func writeScaling(b *strings.Builder, curves []Curve) {
	if len(curves) == 0 {
		return
	}
	b.WriteString("\n## Scaling\n\nEach curve is measured in this run; SLOPE is the least-squares slope of log y on log x " +
		"(1 = linear, 0 = flat, 2 = quadratic), GROWTH is y at the last point over y at the first. " +
		fmt.Sprintf("A slope above %.2f is marked SUPERLINEAR.\n\n", Superlinear))
	b.WriteString("| curve | x | y | points (x: y) | slope | growth | expected | plot |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, c := range curves {
		var pts []string
		for _, p := range c.Points {
			pts = append(pts, FormatValue(p.X)+": "+FormatValue(p.Y))
		}
		slope := fmt.Sprintf("%.2f", c.Slope)
		if c.Slope > Superlinear {
			slope += " SUPERLINEAR"
		}
		plot := "-"
		if c.Plot != "" {
			plot = fmt.Sprintf("[svg](%s)", c.Plot)
		}
		exp := c.Expect
		if c.Note != "" {
			exp += " (" + c.Note + ")"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %.3gx | %s | %s |\n", c.Title, c.XLabel, c.YLabel,
			strings.Join(pts, ", "), slope, c.Growth(), exp, plot)
	}
}

// savePlots writes one SVG per curve into dir/<sub>/<name>.svg and sets
// each curve's Plot to sub/<name>.svg.
func savePlots(dir, sub string, curves []Curve) error {
	if len(curves) == 0 {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
		return err
	}
	for i := range curves {
		rel := filepath.Join(sub, curves[i].Name+".svg")
		f, err := os.Create(filepath.Join(dir, rel))
		if err != nil {
			return err
		}
		err = WriteSVG(f, curves[i])
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		curves[i].Plot = rel
	}
	return nil
}

// WriteSVG draws c on log-log axes (points, the fitted line, the axis
// labels, one tick per decade) as a 640x400 SVG.
func WriteSVG(w io.Writer, c Curve) error {
	const W, H, ml, mr, mt, mb = 640.0, 400.0, 70.0, 20.0, 40.0, 50.0
	var pts []Point
	for _, p := range c.Points {
		if p.X > 0 && p.Y > 0 {
			pts = append(pts, p)
		}
	}
	if len(pts) == 0 {
		return fmt.Errorf("bench: curve %s has no positive point to plot", c.Name)
	}
	lx0, lx1, ly0, ly1 := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, p := range pts {
		lx, ly := math.Log10(p.X), math.Log10(p.Y)
		lx0, lx1, ly0, ly1 = math.Min(lx0, lx), math.Max(lx1, lx), math.Min(ly0, ly), math.Max(ly1, ly)
	}
	lx0, lx1 = math.Floor(lx0), math.Max(math.Ceil(lx1), math.Floor(lx0)+1)
	ly0, ly1 = math.Floor(ly0), math.Max(math.Ceil(ly1), math.Floor(ly0)+1)
	px := func(x float64) float64 { return ml + (math.Log10(x)-lx0)/(lx1-lx0)*(W-ml-mr) }
	py := func(y float64) float64 { return H - mb - (math.Log10(y)-ly0)/(ly1-ly0)*(H-mt-mb) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="%g" height="%g" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%g" y="20" font-size="14">%s (slope %.2f)</text>`+"\n", ml, svgEscape(c.Title), c.Slope)
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="black"/>`+"\n", ml, mt, W-ml-mr, H-mt-mb)
	for d := lx0; d <= lx1; d++ {
		x := ml + (d-lx0)/(lx1-lx0)*(W-ml-mr)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#ddd"/><text x="%.1f" y="%g" text-anchor="middle">%s</text>`+"\n",
			x, mt, x, H-mb, x, H-mb+16, FormatValue(math.Pow(10, d)))
	}
	for d := ly0; d <= ly1; d++ {
		y := H - mb - (d-ly0)/(ly1-ly0)*(H-mt-mb)
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/><text x="%g" y="%.1f" text-anchor="end">%s</text>`+"\n",
			ml, y, W-mr, y, ml-4, y+4, FormatValue(math.Pow(10, d)))
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n", ml+(W-ml-mr)/2, H-12, svgEscape(c.XLabel))
	fmt.Fprintf(&b, `<text x="14" y="%g" text-anchor="middle" transform="rotate(-90 14 %g)">%s</text>`+"\n", mt+(H-mt-mb)/2, mt+(H-mt-mb)/2, svgEscape(c.YLabel))
	if s := LogLogSlope(pts); !math.IsNaN(s) {
		// The fitted line through the points' centroid in log space.
		var mx, my float64
		for _, p := range pts {
			mx, my = mx+math.Log10(p.X), my+math.Log10(p.Y)
		}
		mx, my = mx/float64(len(pts)), my/float64(len(pts))
		a, z := pts[0].X, pts[len(pts)-1].X
		ya, yz := math.Pow(10, my+s*(math.Log10(a)-mx)), math.Pow(10, my+s*(math.Log10(z)-mx))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#c33" stroke-dasharray="4 3"/>`+"\n", px(a), py(ya), px(z), py(yz))
	}
	var poly []string
	for _, p := range pts {
		poly = append(poly, fmt.Sprintf("%.1f,%.1f", px(p.X), py(p.Y)))
	}
	fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#36c"/>`+"\n", strings.Join(poly, " "))
	for _, p := range pts {
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="#36c"/>`+"\n", px(p.X), py(p.Y))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func svgEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func pow(x, y float64) float64 { return math.Pow(x, y) }
