package testenv

import (
	"math"
	"strconv"
)

// The number formats the load tools' tables share, so that a memory or a
// ratio reads the same in each.

// MiB formats a byte count in MiB with one decimal, "-" for none.
func MiB(b int64) string {
	if b == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64)
}

// Round3 rounds to three decimals: what a tool's JSON and logs keep of a
// measure, below which the machine's noise is all there is.
func Round3(f float64) float64 { return math.Round(f*1000) / 1000 }
