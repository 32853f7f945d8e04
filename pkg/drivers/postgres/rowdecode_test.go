package postgres

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kite-db/kite/pkg/drivers/postgres/pgtest"
)

// decoderRows are rows in Range's column order, sent as arrays and read
// back in order, so a test controls every value, NULLs included.
const decoderRows = `SELECT k, c, m, v, l%s FROM unnest($1::bytea[], $2::int8[], $3::int8[],
	$4::int8[], $5::int8[], $6::bytea[]) WITH ORDINALITY AS t(k, c, m, v, l, val, i) ORDER BY i`

func decoderArgs(kvs []*mvccpb.KeyValue) []any {
	var k, val [][]byte
	var c, m, v, l []int64
	for _, kv := range kvs {
		k, val = append(k, kv.Key), append(val, kv.Value)
		c, m, v, l = append(c, kv.CreateRevision), append(m, kv.ModRevision), append(v, kv.Version), append(l, kv.Lease)
	}
	return []any{k, c, m, v, l, val}
}

// decodeAll reads every row of sql with a kvDecoder, and reports whether
// it decoded them itself (raw) or through Scan.
func decodeAll(ctx context.Context, conn *pgx.Conn, sql string, keysOnly bool, limit int64, args ...any) ([]*mvccpb.KeyValue, bool, error) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	dec := newKVDecoder(keysOnly, limit)
	var out []*mvccpb.KeyValue
	for rows.Next() {
		kv := &mvccpb.KeyValue{}
		if err := dec.decode(rows, kv); err != nil {
			return nil, dec.raw, err
		}
		out = append(out, kv)
	}
	return out, dec.raw, rows.Err()
}

// scanAll is decodeAll through pgx's Scan alone, what Range did before
// kvDecoder.
func scanAll(ctx context.Context, conn *pgx.Conn, sql string, keysOnly bool, args ...any) ([]*mvccpb.KeyValue, error) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*mvccpb.KeyValue
	for rows.Next() {
		kv := &mvccpb.KeyValue{}
		dest := []any{&kv.Key, &kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease, &kv.Value}
		if keysOnly {
			dest = dest[:5]
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, kv)
	}
	return out, rows.Err()
}

// TestKVDecoder compares the decoder with what was stored and with Scan:
// NULL and empty values (nil and non-nil empty slices), an empty key,
// int8 edge values, values around and far above the slab limits, and
// enough rows of varied sizes to fill several slabs; with and without the
// value column, in the binary format (decoded from RawValues) and the text
// format (through Scan), with the row count known, unknown and
// underestimated.
func TestKVDecoder(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	want := []*mvccpb.KeyValue{
		{Key: []byte("a"), CreateRevision: 1, ModRevision: 2, Version: 3, Value: []byte("v")},
		{Key: []byte("empty value"), CreateRevision: 4, ModRevision: 4, Version: 1, Value: []byte{}},
		{Key: []byte("null value"), CreateRevision: 5, ModRevision: 5, Version: 1, Value: nil},
		{Key: []byte{}, Value: []byte{}},
		{Key: []byte("edges"), CreateRevision: math.MinInt64, ModRevision: math.MaxInt64, Version: -1,
			Lease: -7, Value: []byte{0, 0xff, 0}},
		{Key: []byte("min lease"), CreateRevision: 1 << 32, ModRevision: 1<<63 - 1<<8, Version: 0x0102030405060708,
			Lease: math.MinInt64, Value: []byte("x")},
		{Key: []byte("slab/4"), Value: bytes.Repeat([]byte("q"), maxSlab/4-len("slab/4"))},
		{Key: []byte("slab/4+1"), Value: bytes.Repeat([]byte("r"), maxSlab/4+1)},
		{Key: []byte("slab+1"), Value: bytes.Repeat([]byte("s"), maxSlab+1)},
		{Key: []byte("1 MiB"), Value: bytes.Repeat([]byte{0xaa, 0x55}, 1<<19)},
	}
	for i := range 300 {
		want = append(want, &mvccpb.KeyValue{Key: fmt.Appendf(nil, "k%04d", i), CreateRevision: int64(i),
			ModRevision: int64(i) << 40, Version: int64(i % 3), Lease: int64(-i),
			Value: bytes.Repeat([]byte{byte(i)}, i*37%2000)})
	}
	args := decoderArgs(want)

	for _, keysOnly := range []bool{false, true} {
		sql := fmt.Sprintf(decoderRows, ", val")
		wantKVs := want
		if keysOnly {
			sql = fmt.Sprintf(decoderRows, "")
			wantKVs = nil
			for _, kv := range want {
				wantKVs = append(wantKVs, &mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision,
					ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease})
			}
		}
		scanned, err := scanAll(ctx, conn, sql, keysOnly, args...)
		if err != nil {
			t.Fatalf("keysOnly %v: scan: %v", keysOnly, err)
		}
		if !reflect.DeepEqual(fieldsAll(scanned), fieldsAll(wantKVs)) {
			t.Fatalf("keysOnly %v: Scan does not give back the rows stored", keysOnly)
		}
		for _, format := range []int16{pgx.BinaryFormatCode, pgx.TextFormatCode} {
			for _, limit := range []int64{0, int64(len(want)), 1, 100} {
				name := fmt.Sprintf("keysOnly=%v format=%d limit=%d", keysOnly, format, limit)
				fargs := append([]any{pgx.QueryResultFormats{format}}, args...)
				got, raw, err := decodeAll(ctx, conn, sql, keysOnly, limit, fargs...)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if raw != (format == pgx.BinaryFormatCode) {
					t.Errorf("%s: decoded from RawValues %v, want %v", name, raw, !raw)
				}
				if len(got) != len(wantKVs) {
					t.Fatalf("%s: %d rows, want %d", name, len(got), len(wantKVs))
				}
				for i := range got {
					if g, w := fields(got[i]), fields(wantKVs[i]); !reflect.DeepEqual(g, w) {
						t.Errorf("%s: row %d: got %v, want %v (as Scan gives)", name, i, g, w)
					}
					for _, b := range [][]byte{got[i].Key, got[i].Value} {
						if cap(b) != len(b) {
							t.Errorf("%s: row %d: a field of length %d has capacity %d: an append would overwrite the next",
								name, i, len(b), cap(b))
						}
					}
				}
			}
		}
	}
}

// TestKVDecoderColumns: columns of other types or in the text format go
// through Scan and decode as Scan would; a NULL int8 is an error either
// way, as Scan makes it.
func TestKVDecoderColumns(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	int4 := `SELECT 'k'::bytea, 1::int4, 2::int4, 3::int4, (-4)::int4, 'v'::bytea`
	got, raw, err := decodeAll(ctx, conn, int4, false, 0)
	if err != nil || raw {
		t.Fatalf("int4 columns: raw %v, error %v; want Scan, no error", raw, err)
	}
	want := []*mvccpb.KeyValue{{Key: []byte("k"), CreateRevision: 1, ModRevision: 2, Version: 3, Lease: -4, Value: []byte("v")}}
	if !reflect.DeepEqual(fieldsAll(got), fieldsAll(want)) {
		t.Fatalf("int4 columns: got %v, want %v", fieldsAll(got), fieldsAll(want))
	}

	nullInt := `SELECT 'k'::bytea, NULL::int8, 2::int8, 3::int8, 4::int8, 'v'::bytea`
	for _, format := range []int16{pgx.BinaryFormatCode, pgx.TextFormatCode} {
		if _, err := scanAll(ctx, conn, nullInt, false, pgx.QueryResultFormats{format}); err == nil {
			t.Fatalf("format %d: Scan of a NULL int8 succeeded", format)
		}
		if _, _, err := decodeAll(ctx, conn, nullInt, false, 0, pgx.QueryResultFormats{format}); err == nil {
			t.Errorf("format %d: decoding a NULL int8 succeeded, want an error as from Scan", format)
		}
	}
}

// TestRangeTextFormat: Range on a connection that gets results in the text
// format (the simple protocol, as behind some poolers) returns what it
// returns in the binary format, latest and historical, with and without
// values.
func TestRangeTextFormat(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	b, err := Open(ctx, dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var rev int64
	put := func(key string, lease int64, value []byte) {
		t.Helper()
		tx, err := b.BeginWrite(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rev++
		kv := &mvccpb.KeyValue{Key: []byte(key), CreateRevision: rev, ModRevision: rev, Version: 1, Lease: lease, Value: value}
		if err := tx.Put(ctx, kv, 0); err != nil {
			t.Fatal(err)
		}
		if err := tx.SetRevisions(ctx, rev, 0); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	put("a", 0, []byte("one"))
	put("b", -3, []byte{})
	put("c", math.MaxInt64, bytes.Repeat([]byte("c"), 40000))
	put("a", 0, []byte("two"))

	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	text, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer text.Close(ctx)

	rtx, err := b.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rtx.Rollback()
	textReader := &reader{conn: text, q: b.q, latest: rev}
	for _, at := range []int64{rev, rev - 1} {
		for _, keysOnly := range []bool{false, true} {
			for _, limit := range []int64{0, 2} {
				bin, err := rtx.Range(ctx, []byte("a"), []byte{0}, at, limit, keysOnly)
				if err != nil {
					t.Fatal(err)
				}
				txt, err := textReader.Range(ctx, []byte("a"), []byte{0}, at, limit, keysOnly)
				if err != nil {
					t.Fatal(err)
				}
				if len(bin) == 0 || !reflect.DeepEqual(fieldsAll(bin), fieldsAll(txt)) {
					t.Errorf("rev %d keysOnly %v limit %d: binary format %v, text format %v",
						at, keysOnly, limit, fieldsAll(bin), fieldsAll(txt))
				}
			}
		}
	}
}

// kvFields are a KeyValue's fields without its protobuf state, for
// reflect.DeepEqual, which tells a nil slice from an empty one as the
// decoder must.
type kvFields struct {
	Key                                         []byte
	CreateRevision, ModRevision, Version, Lease int64
	Value                                       []byte
}

func fields(kv *mvccpb.KeyValue) kvFields {
	return kvFields{kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease, kv.Value}
}

func fieldsAll(kvs []*mvccpb.KeyValue) []kvFields {
	out := make([]kvFields, len(kvs))
	for i, kv := range kvs {
		out[i] = fields(kv)
	}
	return out
}

// String abbreviates long values in failure messages.
func (f kvFields) String() string {
	v := fmt.Sprintf("%q", f.Value)
	if len(f.Value) > 16 {
		v = fmt.Sprintf("%q...(%d bytes)", f.Value[:16], len(f.Value))
	}
	if f.Value == nil {
		v = "nil"
	}
	return fmt.Sprintf("{%q %d %d %d %d %s}", f.Key, f.CreateRevision, f.ModRevision, f.Version, f.Lease, v)
}
