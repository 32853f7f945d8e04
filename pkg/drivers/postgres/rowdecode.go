package postgres

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// kvDecoder reads rows of (key, create_rev, mod_rev, version, lease
// [, value]), the columns of every Range variant and of the prefetch, into
// KeyValues.
//
// A list pays pgx's Scan for every row: a scan plan per column and an
// allocation per key and per value. In the binary format, which pgx asks
// for with prepared statements, these columns are simple enough to read
// from RawValues directly, and the keys and values are copied into shared
// slabs: a few allocations per page instead of two per row. Anything else
// (the text format of the simple protocol, other column types) goes
// through Scan, and decodes exactly as before.
//
// Slabs start at one row and double up to maxSlab, so a short result
// allocates little and a KeyValue kept longer than its neighbours pins at
// most one slab; none is made larger than the rows the query's LIMIT still
// allows, so a page's last slab ends close to its last row. Each field's
// capacity is its length, so an append to one never writes into the next.
type kvDecoder struct {
	withValue bool   // the sixth column, value, is selected
	checked   bool   // the columns have been looked at
	raw       bool   // they are as expected: decode RawValues
	dest      [6]any // Scan's, kept so that a row allocates none

	// The slab is advanced by an offset rather than by reslicing, so that
	// a row stores no pointer into d (a GC write barrier) except when it
	// starts a new slab.
	slab []byte
	used int   // bytes of slab handed out
	left int64 // rows the query may still return; 0 if unknown
}

// newKVDecoder returns a decoder for the rows of one query; keysOnly
// queries select no value. limit bounds the rows the query returns (0:
// unknown).
func newKVDecoder(keysOnly bool, limit int64) *kvDecoder {
	return &kvDecoder{withValue: !keysOnly, left: max(limit, 0)}
}

// maxSlab bounds a slab. A row larger than a quarter of it is copied into
// an allocation of its own, so that it neither wastes the rest of the
// current slab nor grows the next one.
const maxSlab = 64 << 10

// decode reads the current row of rows into kv. NULLs come out as Scan
// gives them: a NULL bytea is a nil slice, a NULL int8 an error. Without
// the value column kv.Value is left as it is (nil).
func (d *kvDecoder) decode(rows pgx.Rows, kv *mvccpb.KeyValue) error {
	if !d.checked {
		d.checked = true
		d.raw = d.binaryColumns(rows)
	}
	if !d.raw {
		return d.scan(rows, kv)
	}
	vals := rows.RawValues()
	if len(vals) != d.columns() {
		return fmt.Errorf("%d columns, want %d", len(vals), d.columns())
	}
	for i, dst := range [...]*int64{&kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease} {
		v := vals[1+i]
		if len(v) != 8 {
			if v == nil {
				return fmt.Errorf("column %d: NULL in an int8 column", 1+i)
			}
			return fmt.Errorf("column %d: int8 of %d bytes", 1+i, len(v))
		}
		*dst = int64(binary.BigEndian.Uint64(v))
	}
	key, value := vals[0], []byte(nil)
	if d.withValue {
		value = vals[5]
	}
	row := d.copyRow(key, value)
	kv.Key = field(row, 0, key)
	if d.withValue {
		kv.Value = field(row, len(key), value)
	}
	if d.left > 0 {
		d.left--
	}
	return nil
}

func (d *kvDecoder) columns() int {
	if d.withValue {
		return 6
	}
	return 5
}

// binaryColumns reports whether rows has the expected columns (bytea,
// four int8, bytea), all in the binary format.
func (d *kvDecoder) binaryColumns(rows pgx.Rows) bool {
	fds := rows.FieldDescriptions()
	if len(fds) != d.columns() {
		return false
	}
	for i, fd := range fds {
		want := uint32(pgtype.Int8OID)
		if i == 0 || i == 5 {
			want = pgtype.ByteaOID
		}
		if fd.DataTypeOID != want || fd.Format != pgx.BinaryFormatCode {
			return false
		}
	}
	return true
}

// scan is the general path, through pgx's scan plans.
func (d *kvDecoder) scan(rows pgx.Rows, kv *mvccpb.KeyValue) error {
	d.dest[0], d.dest[1], d.dest[2], d.dest[3], d.dest[4] = &kv.Key, &kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease
	d.dest[5] = &kv.Value
	return rows.Scan(d.dest[:d.columns()]...)
}

// copyRow copies a row's key and value, which RawValues holds only until
// the next row, one after the other into a slab, or into an allocation of
// their own if they are large.
func (d *kvDecoder) copyRow(key, value []byte) []byte {
	n := len(key) + len(value)
	if n > maxSlab/4 {
		// Unlike make, bytes.Join does not zero what it is about to fill.
		return bytes.Join([][]byte{key, value}, nil)
	}
	if n > len(d.slab)-d.used {
		size := min(max(2*len(d.slab), n), maxSlab)
		if d.left > 0 && int64(size/n) > d.left {
			size = n * int(d.left) // rows to come are taken to be no larger
		}
		// Grow rounds up to the allocator's size class, whose slack
		// would otherwise be lost.
		d.slab = slices.Grow([]byte(nil), size)
		d.slab = d.slab[:cap(d.slab)]
		d.used = 0
	}
	row := d.slab[d.used : d.used+n : d.used+n]
	d.used += n
	copy(row, key)
	copy(row[len(key):], value)
	return row
}

// field returns src's copy in row, at off. A NULL (nil src) stays nil and
// an empty value non-nil, as Scan leaves them; the capacity is the length,
// so an append to one field cannot overwrite the next.
func field(row []byte, off int, src []byte) []byte {
	switch {
	case src == nil:
		return nil
	case len(src) == 0:
		return []byte{}
	}
	return row[off : off+len(src) : off+len(src)]
}
