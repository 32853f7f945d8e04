package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/kite-db/kite/pkg/mvcc"
)

// kiteTables are the tables Size measures and Defragment rebuilds.
func kiteTables() []string {
	return []string{"kite_log", "kite_live", "kite_lease", "kite_alarm", "kite_revision", "kite_auth", "kite_schema"}
}

// sqlStatsSize measures kite's tables with their indexes from InnoDB's
// statistics: the part in use, and with DATA_FREE the whole. The
// statistics lag writes by seconds to minutes (InnoDB recalculates them in
// the background after a tenth of a table changed, and MySQL 8 caches them
// for information_schema_stats_expiry), so they estimate the part in use
// and stand in for the file sizes only where those cannot be read.
const sqlStatsSize = `SELECT COALESCE(SUM(data_length + index_length + data_free), 0),
	COALESCE(SUM(data_length + index_length), 0)
	FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name IN (`

// The tablespace views give each table's file (file-per-table, the
// default) as it is now on disk, so a quota is judged on what was just
// written, as etcd's is on its bbolt file. MariaDB names the view
// INNODB_SYS_TABLESPACES, MySQL 8 INNODB_TABLESPACES; both need the
// PROCESS privilege.
var sqlFileSize = []string{
	`SELECT COALESCE(SUM(allocated_size), 0), COUNT(*) FROM information_schema.innodb_sys_tablespaces WHERE name IN (`,
	`SELECT COALESCE(SUM(allocated_size), 0), COUNT(*) FROM information_schema.innodb_tablespaces WHERE name IN (`,
}

// Size implements mvcc.Backend: the bytes of kite's table files, and of
// its rows and indexes in them. Without the PROCESS privilege, or with
// tables in the shared system tablespace, both come from the statistics.
func (b *Backend) Size(ctx context.Context) (size, inUse int64, err error) {
	if b.closed.Load() {
		return 0, 0, mvcc.ErrClosed
	}
	tables := kiteTables()
	args := make([]any, len(tables))
	for i, t := range tables {
		args[i] = t
	}
	in := strings.Repeat("?, ", len(tables)-1) + "?)"
	var statsSize int64
	if err := b.db.QueryRowContext(ctx, sqlStatsSize+in, args...).Scan(&statsSize, &inUse); err != nil {
		return 0, 0, classify(fmt.Errorf("read database size: %w", err))
	}
	size = statsSize
	if files, ok := b.fileSize(ctx, tables); ok {
		size = files
	}
	return size, min(inUse, size), nil
}

// fileSize sums the allocated size of kite's table files, or reports false
// when this server does not show them to this user. Which view answers is
// remembered; a refusal is remembered too, so it is asked once.
func (b *Backend) fileSize(ctx context.Context, tables []string) (int64, bool) {
	view := int(b.sizeView.Load())
	if view < 0 {
		return 0, false
	}
	prefix, ok := tablespacePrefix(b.dbName)
	if !ok {
		b.sizeView.Store(-1)
		return 0, false
	}
	args := make([]any, len(tables))
	for i, t := range tables {
		args[i] = prefix + t
	}
	in := strings.Repeat("?, ", len(tables)-1) + "?)"
	for ; view < len(sqlFileSize); view++ {
		var size, files int64
		err := b.db.QueryRowContext(ctx, sqlFileSize[view]+in, args...).Scan(&size, &files)
		if err == nil && files == int64(len(tables)) {
			b.sizeView.Store(int32(view))
			return size, true
		}
		if err == nil || !isUnknownTable(err) && !isDenied(err) {
			// Tables outside their own files (innodb_file_per_table off),
			// or a transient failure: the statistics answer this time.
			return 0, false
		}
	}
	b.log.Info("table file sizes are not readable (no PROCESS privilege?); the database size comes from InnoDB's statistics, which lag writes")
	b.sizeView.Store(-1)
	return 0, false
}

// tablespacePrefix is the database's part of an InnoDB tablespace name,
// in the server's file-name encoding: letters, digits and _ as they are,
// any other ASCII character as @ and four hex digits. Other characters
// have encodings of their own; for them it reports false.
func tablespacePrefix(db string) (string, bool) {
	var sb strings.Builder
	for _, r := range db {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			sb.WriteRune(r)
		case r < 0x80:
			fmt.Fprintf(&sb, "@%04x", r)
		default:
			return "", false
		}
	}
	return sb.String() + "/", true
}

// Defragment implements mvcc.Backend as etcd's defrag does its job:
// OPTIMIZE TABLE rebuilds each InnoDB table (ALTER TABLE ... FORCE, then
// ANALYZE), which gives the space of rows removed by compaction and
// overwrites back to the file system and refreshes the statistics Size
// reads. InnoDB reuses free pages for new rows anyway; the rebuild is
// online, writes wait only for its short final step.
func (b *Backend) Defragment(ctx context.Context) error {
	if b.closed.Load() {
		return mvcc.ErrClosed
	}
	rows, err := b.db.QueryContext(ctx, "OPTIMIZE TABLE "+strings.Join(kiteTables(), ", "))
	if err != nil {
		return classify(fmt.Errorf("defragment: %w", err))
	}
	defer rows.Close()
	var problems []error
	for rows.Next() {
		var table, op, kind, text string
		if err := rows.Scan(&table, &op, &kind, &text); err != nil {
			return fmt.Errorf("defragment: %w", err)
		}
		// InnoDB answers "note: Table does not support optimize, doing
		// recreate + analyze instead", then "status: OK".
		if strings.EqualFold(kind, "error") {
			problems = append(problems, fmt.Errorf("%s: %s", table, text))
		}
	}
	if err := errors.Join(rows.Err(), errors.Join(problems...)); err != nil {
		return classify(fmt.Errorf("defragment: %w", err))
	}
	b.log.Info("defragmented")
	return nil
}
