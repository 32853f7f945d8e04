package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

const (
	// defaultCheckpointInterval is the least time between two background
	// checkpoints (Options.CheckpointInterval): pages written again
	// meanwhile are copied once, and the database file is fsynced at most
	// this often.
	defaultCheckpointInterval = 100 * time.Millisecond
	// fallbackCheckpointPages is the writer's own wal_autocheckpoint, a
	// bound on the WAL (4 KiB pages) should the background checkpoints fall
	// behind. SQLite's default, 1000, is what the background ones replace.
	fallbackCheckpointPages = 8192
)

// checkpointer copies committed WAL frames into the database file on a
// connection of its own. SQLite's automatic checkpoint runs inside the
// COMMIT that crosses wal_autocheckpoint, on the writer, so every
// thousandth page or so one batch of clients waited for the copy and the
// database fsync (a tenth of the writer's CPU under load). A PASSIVE
// checkpoint on another connection runs beside the writer: WAL writers
// and checkpointers do not block each other. Durability is untouched: a
// commit is durable once its WAL frames are fsynced, before the checkpoint.
type checkpointer struct {
	db    *sql.DB
	conn  *sql.Conn
	log   *slog.Logger
	every time.Duration // Options.CheckpointInterval
	kickc chan struct{} // a commit happened (coalesced)
	stopc chan struct{}
	done  chan struct{}
}

func startCheckpointer(ctx context.Context, path string, opts Options, log *slog.Logger) (*checkpointer, error) {
	db, err := sql.Open("sqlite", dsn(path, opts))
	if err != nil {
		return nil, fmt.Errorf("open checkpoint connection: %w", err)
	}
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("connect checkpointer: %w", err), db.Close())
	}
	c := &checkpointer{db: db, conn: conn, log: log, every: opts.CheckpointInterval,
		kickc: make(chan struct{}, 1), stopc: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	return c, nil
}

// kick tells the checkpointer that a commit happened. It never blocks.
func (c *checkpointer) kick() {
	select {
	case c.kickc <- struct{}{}:
	default:
	}
}

func (c *checkpointer) loop() {
	defer close(c.done)
	pause := time.NewTimer(c.every)
	pause.Stop()
	for {
		select {
		case <-c.stopc:
			return
		case <-c.kickc:
		}
		var busy, logPages, done int64
		err := c.conn.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").
			Scan(&busy, &logPages, &done)
		if err != nil {
			c.log.Warn("background checkpoint failed", "err", err)
		}
		pause.Reset(c.every)
		select {
		case <-c.stopc:
			return
		case <-pause.C:
		}
	}
}

func (c *checkpointer) close() error {
	close(c.stopc)
	<-c.done
	return errors.Join(c.conn.Close(), c.db.Close())
}
