package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Row is one line of the report: a raftps figure next to its baseline
// measured in the same run. NaN means not measured ("n/a").
type Row struct {
	Section  string  `json:"section"`
	Metric   string  `json:"metric"`
	Unit     string  `json:"unit"`
	Ours     float64 `json:"raftps"`
	BaseName string  `json:"baseline_name,omitempty"`
	Base     float64 `json:"baseline"`
	Note     string  `json:"note,omitempty"`
	// Ratios are the ratios of the pairs a side-by-side row was measured
	// in (the two sides run interleaved, A B A B ...; see pairRow); empty
	// for a row measured once.
	Ratios []float64 `json:"ratios,omitempty"`
}

// Ratio is the median of Ratios if the row was measured in pairs, else
// Ours/Base; NaN when either is missing or Base is zero.
func (r Row) Ratio() float64 {
	if len(r.Ratios) > 0 {
		return Median(r.Ratios)
	}
	if math.IsNaN(r.Ours) || math.IsNaN(r.Base) || r.Base == 0 {
		return math.NaN()
	}
	return r.Ours / r.Base
}

// Spread returns the smallest and largest pair ratio (NaN, NaN for a row
// not measured in pairs).
func (r Row) Spread() (lo, hi float64) {
	if len(r.Ratios) == 0 {
		return NA, NA
	}
	return slices.Min(r.Ratios), slices.Max(r.Ratios)
}

// pairRow fills row from figures measured in pairs: ours[i] and base[i]
// were measured one right after the other, pair after pair (A B A B ...),
// so that a noisy moment of the machine hits one pair, not a whole side.
// NaN marks a side that failed; its pair is left out. Ours and Base are
// the medians of each side, Ratios the per-pair ratios (whose median is
// the row's ratio).
func pairRow(row Row, ours, base []float64) Row {
	var o, b []float64
	row.Ratios = nil
	for i := range min(len(ours), len(base)) {
		if !math.IsNaN(ours[i]) {
			o = append(o, ours[i])
		}
		if !math.IsNaN(base[i]) {
			b = append(b, base[i])
		}
		if !math.IsNaN(ours[i]) && !math.IsNaN(base[i]) && base[i] != 0 {
			row.Ratios = append(row.Ratios, ours[i]/base[i])
		}
	}
	row.Ours, row.Base = Median(o), Median(b)
	return row
}

// LowerIsBetter reports whether the unit is a time (latency, failover).
func (r Row) LowerIsBetter() bool {
	switch r.Unit {
	case "ms", "s", "us", "ns/op":
		return true
	}
	return false
}

// MarshalJSON writes NaN as null and adds the ratio.
func (r Row) MarshalJSON() ([]byte, error) {
	num := func(f float64) *float64 {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
		return &f
	}
	lo, hi := r.Spread()
	return json.Marshal(struct {
		Section       string    `json:"section"`
		Metric        string    `json:"metric"`
		Unit          string    `json:"unit"`
		Ours          *float64  `json:"raftps"`
		BaseName      string    `json:"baseline_name,omitempty"`
		Base          *float64  `json:"baseline"`
		Ratio         *float64  `json:"ratio"`
		RatioMin      *float64  `json:"ratio_min,omitempty"`
		RatioMax      *float64  `json:"ratio_max,omitempty"`
		Ratios        []float64 `json:"ratios,omitempty"`
		LowerIsBetter bool      `json:"lower_is_better"`
		Note          string    `json:"note,omitempty"`
	}{r.Section, r.Metric, r.Unit, num(r.Ours), r.BaseName, num(r.Base), num(r.Ratio()), num(lo), num(hi), r.Ratios, r.LowerIsBetter(), r.Note})
}

// NA is the value of a figure that was not measured.
var NA = math.NaN()

// FormatValue prints v with 3 significant digits (at least the integer
// part), or "n/a".
func FormatValue(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "n/a"
	case v == 0:
		return "0"
	}
	a := math.Abs(v)
	switch {
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a >= 0.01:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// FormatRatio prints a ratio as "0.853x", or "n/a". Three decimals, so
// that a row just below an aim (0.895) does not print as meeting it
// (0.90x).
func FormatRatio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	return strconv.FormatFloat(v, 'f', 3, 64) + "x"
}

var tableHeader = []string{"SECTION", "METRIC", "UNIT", "RAFTPS", "BASELINE", "VALUE", "RATIO", "SPREAD (PAIRS)", "NOTE"}

// FormatSpread prints a row's pair ratios as "0.703-0.931x (5)", or "-".
func (r Row) FormatSpread() string {
	lo, hi := r.Spread()
	if math.IsNaN(lo) {
		return "-"
	}
	return fmt.Sprintf("%s-%s (%d)", strconv.FormatFloat(lo, 'f', 3, 64), FormatRatio(hi), len(r.Ratios))
}

func (r Row) cells() []string {
	unit := r.Unit
	if r.LowerIsBetter() {
		unit += " (lower better)"
	}
	base := r.BaseName
	if base == "" {
		base = "-"
	}
	bv := FormatValue(r.Base)
	if r.BaseName == "" && math.IsNaN(r.Base) {
		bv = "-"
	}
	return []string{r.Section, r.Metric, unit, FormatValue(r.Ours), base, bv, FormatRatio(r.Ratio()), r.FormatSpread(), r.Note}
}

// WriteTable writes rows as one aligned text table: a header, a rule, and
// a blank line between sections. Numbers are right-aligned.
func WriteTable(w io.Writer, rows []Row) error {
	all := [][]string{tableHeader}
	for _, r := range rows {
		all = append(all, r.cells())
	}
	width := make([]int, len(tableHeader))
	for _, c := range all {
		for i, s := range c {
			width[i] = max(width[i], len([]rune(s)))
		}
	}
	right := map[int]bool{3: true, 5: true, 6: true, 7: true}
	var b strings.Builder
	line := func(c []string) {
		for i, s := range c {
			pad := strings.Repeat(" ", width[i]-len([]rune(s)))
			if i == len(c)-1 {
				b.WriteString(s)
				break
			}
			if right[i] {
				b.WriteString(pad + s)
			} else {
				b.WriteString(s + pad)
			}
			b.WriteString("  ")
		}
		b.WriteString("\n")
	}
	trim := func() { // no trailing blanks when the note is empty
		s := strings.TrimRight(b.String(), " \n") + "\n"
		b.Reset()
		b.WriteString(s)
	}
	line(all[0])
	trim()
	total := len(tableHeader[len(tableHeader)-1]) // the note column is ragged
	for _, x := range width[:len(width)-1] {
		total += x + 2
	}
	b.WriteString(strings.Repeat("-", total) + "\n")
	prev := ""
	for i, c := range all[1:] {
		if i > 0 && rows[i].Section != prev {
			b.WriteString("\n")
		}
		prev = rows[i].Section
		line(c)
		trim()
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMarkdownTable writes rows as a GitHub-flavoured markdown table.
func WriteMarkdownTable(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| " + strings.Join(tableHeader, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", 3) + strings.Repeat(" ---: |", 1) + " --- |" + strings.Repeat(" ---: |", 3) + " --- |\n")
	for _, r := range rows {
		c := r.cells()
		for i := range c {
			c[i] = strings.ReplaceAll(c[i], "|", `\|`)
		}
		b.WriteString("| " + strings.Join(c, " | ") + " |\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// fmtSeconds lists xs (seconds) for notes, each as FormatValue shows it.
func fmtSeconds(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = FormatValue(x)
	}
	return fmt.Sprintf("[%s]", strings.Join(s, " "))
}

// Pairs is the number of interleaved pairs (A B A B ...) every
// side-by-side row is measured in.
const Pairs = 5
