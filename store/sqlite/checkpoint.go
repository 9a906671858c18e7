package sqlite

import (
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// fallbackCheckpointPages is the WAL size (in pages) at which a committing
// writer checkpoints itself (SQLite's wal_autocheckpoint, default 1000);
// the background checkpointer normally keeps the WAL far below it.
const fallbackCheckpointPages = 20000

// checkpointDelay is how long the checkpointer lets commits accumulate
// after the first one since its last run.
const checkpointDelay = 50 * time.Millisecond

// checkpointLoop copies committed WAL frames into the database file in the
// background (PRAGMA wal_checkpoint(PASSIVE): it blocks neither readers nor
// the writer), so that no commit pays for a checkpoint and its fsyncs, as
// it does with SQLite's automatic checkpoints. Durability is unchanged: a
// commit is durable once in the WAL.
func (s *Store) checkpointLoop() {
	defer close(s.ckDone)
	for {
		select {
		case <-s.ckStop:
			return
		case <-s.dirty:
		}
		select {
		case <-s.ckStop:
			return
		case <-time.After(checkpointDelay):
		}
		// An error (SQLITE_BUSY) leaves the frames for the next run or the
		// writer's fallback.
		s.ck.Exec(`PRAGMA wal_checkpoint(PASSIVE)`)
	}
}

// committed tells the checkpointer that the WAL grew.
func (s *Store) committed() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}
