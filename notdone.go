package retrysafe

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// The mark of an attempt resolved not done. When the completer
// ([Executor.ResolveStranded]) hears ResolveRerun about a stranded
// record, it does not release the record: a released key's next claim
// starts again at Attempt 1, and a downstream that fences attempts
// ("refuse attempts up to N of this key", the promise a not-done answer
// about attempt N asks for) would refuse every later attempt of the key.
// It marks the record instead, fenced by its token and leaving its
// expired lease as it is, so that the next claim takes it over as
// Attempt N+1 without asking again.
//
// The mark is the record's checkpoint, named "retrysafe-not-done
// attempt=N". Its data keeps the checkpoint the attempt had recorded
// (uvarint(len(name)) | name | data; empty when it had none), so that the
// attempt that takes over resumes from it ([Operation.Resumed]) and a
// Resolver asked about a later attempt reads it ([Record].Checkpoint as
// the Resolver gets it), as after a Resolver's re-run on a retry.

// notDonePrefix starts the name of the not-done mark; checkpoint names
// starting with it are the engine's own (see checkCheckpointName).
const (
	notDonePrefix   = notDoneReserved + " attempt="
	notDoneReserved = "retrysafe-not-done"
)

// checkNotReserved refuses a checkpoint name of the application's that
// would read as the engine's mark.
func checkNotReserved(name string) error {
	if strings.HasPrefix(name, notDoneReserved) {
		return fmt.Errorf("retrysafe: checkpoint name %q starts with %q, which the engine reserves for its not-done mark", name, notDoneReserved)
	}
	return nil
}

// markedAttempt returns the attempt cp marks resolved not done, ok false
// when cp is no not-done mark.
func markedAttempt(cp *Checkpoint) (attempt int, ok bool) {
	if cp == nil {
		return 0, false
	}
	n, found := strings.CutPrefix(cp.Name, notDonePrefix)
	if !found {
		return 0, false
	}
	attempt, err := strconv.Atoi(n)
	if err != nil || attempt < 1 || strconv.Itoa(attempt) != n {
		return 0, false
	}
	return attempt, true
}

// ResolvedNotDone reports whether rec's current attempt was resolved not
// done by the completer ([Executor.ResolveStranded], on ResolveRerun): rec
// is processing and carries the completer's mark for rec.Attempt. Such a
// record's outcome is decided: the next claim of its request takes it
// over as Attempt+1 and runs the operation, under either
// Config.OnUnknown, without asking the Resolver again, and later
// completer passes skip it. A takeover raises Attempt, so the mark no
// longer applies to the new attempt.
func (rec *Record) ResolvedNotDone() bool {
	attempt, ok := markedAttempt(rec.Checkpoint)
	return ok && rec.State == StateProcessing && attempt == rec.Attempt
}

// notDoneMark returns the mark of rec's attempt resolved not done,
// keeping the checkpoint the attempt stands on (unmarked, so that marks
// never nest) when it is within the engine's limits (MaxCheckpointName,
// MaxCheckpointData): the mark's data then stays within the room
// CheckpointStoreLimit leaves for wrappers. One larger (written by a
// store's CheckpointTx, say) is not kept: the retry starts from the
// beginning, as after a release, but as the next attempt.
func notDoneMark(rec *Record) *Checkpoint {
	mark := &Checkpoint{Name: notDonePrefix + strconv.Itoa(rec.Attempt)}
	if cp := unmarked(rec.Checkpoint); cp != nil && len(cp.Name) <= MaxCheckpointName && len(cp.Data) <= MaxCheckpointData {
		mark.Data = binary.AppendUvarint(mark.Data, uint64(len(cp.Name)))
		mark.Data = append(mark.Data, cp.Name...)
		mark.Data = append(mark.Data, cp.Data...)
	}
	return mark
}

// unmarked returns the checkpoint cp stands for: cp itself, or, when cp
// is a not-done mark, the checkpoint it keeps (nil when the attempt had
// recorded none, or when the mark's data is not one the engine wrote),
// with the mark's At. It never changes cp.
func unmarked(cp *Checkpoint) *Checkpoint {
	if _, ok := markedAttempt(cp); !ok {
		return cp
	}
	n, size := binary.Uvarint(cp.Data)
	if size <= 0 || n == 0 || n > uint64(len(cp.Data)-size) {
		return nil
	}
	name := cp.Data[size : size+int(n)]
	return &Checkpoint{Name: string(name), Data: cp.Data[size+int(n):], At: cp.At}
}

// unmarkedRecord returns rec as a Resolver reads it: with the checkpoint
// a not-done mark keeps in place of the mark (a copy when that differs).
func unmarkedRecord(rec *Record) *Record {
	cp := unmarked(rec.Checkpoint)
	if cp == rec.Checkpoint {
		return rec
	}
	c := *rec
	c.Checkpoint = cp
	return &c
}
