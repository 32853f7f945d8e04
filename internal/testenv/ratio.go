package testenv

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// The load tools print their results, and kite's against a reference's,
// as right-aligned tables: one layout, so a table of one tool reads as
// another's, each with its own columns.

// Table is a right-aligned table being written to w; every row ends in a
// tab, so the last column is aligned too. Nothing reaches w before Flush.
type Table struct {
	tw *tabwriter.Writer
}

// NewTable starts a table on w.
func NewTable(w io.Writer) *Table {
	return &Table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)}
}

// Row adds a row of cells.
func (t *Table) Row(cells ...string) {
	fmt.Fprint(t.tw, strings.Join(cells, "\t")+"\t\n")
}

// Rowf adds a row formatted as fmt.Fprintf does, its cells separated by
// tabs in format; the row's closing tab and newline are added.
func (t *Table) Rowf(format string, a ...any) {
	fmt.Fprintf(t.tw, format+"\t\n", a...)
}

// Flush writes the table out.
func (t *Table) Flush() error { return t.tw.Flush() }

// Ratio is num/den as "1.23x", "-" when either is 0 (nothing to compare).
// Below 0.1 it keeps two significant digits: kite at 0.6 ms against
// kine's 1 s poll is 0.0006x, not 0.00x.
func Ratio(num, den float64) string {
	if num == 0 || den == 0 {
		return "-"
	}
	if r := num / den; r < 0.1 {
		return strconv.FormatFloat(r, 'g', 2, 64) + "x"
	}
	return strconv.FormatFloat(num/den, 'f', 2, 64) + "x"
}
