package sealed

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/retrysafe/retrysafe"
)

// A sealed checkpoint keeps its Name and At in the clear (operators and
// the engine's observers read the name); its Data is
//
//	checkpointMarker | uvarint(len(id)) | id | nonce(12) | AES-256-GCM(data, aad)
//
// where aad binds the key id, the stored scope, the idempotency key and
// the name. A checkpoint has no header to carry a marker, so the marker
// leads its data; only the wrapper writes it: without a key ring the
// wrapper refuses to store data that starts with it, and with one every
// checkpoint it writes is sealed.
const checkpointMarker = "\x00retrysafe sealed checkpoint v1\x00"

// sealedCheckpoint reports whether cp's data is sealed.
func sealedCheckpoint(cp *retrysafe.Checkpoint) bool {
	return cp != nil && strings.HasPrefix(string(cp.Data), checkpointMarker)
}

// sealCheckpoint returns a copy of cp whose Data is sealed under the ring's
// newest key, bound to scope (as stored), key and cp.Name. nil seals to nil.
func (r *KeyRing) sealCheckpoint(scope, key string, cp *retrysafe.Checkpoint) *retrysafe.Checkpoint {
	if cp == nil {
		return nil
	}
	id := r.Newest()
	b := make([]byte, 0, len(checkpointMarker)+binary.MaxVarintLen64+len(id)+nonceSize+len(cp.Data)+r.newest.Overhead())
	b = append(b, checkpointMarker...)
	b = appendString(b, id)
	nonce := b[len(b) : len(b)+nonceSize]
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails on supported platforms
	b = b[:len(b)+nonceSize]
	b = r.newest.Seal(b, nonce, cp.Data, checkpointAAD(id, scope, key, cp.Name))
	c := *cp
	c.Data = b
	return &c
}

// openCheckpoint returns a copy of cp, sealed by [KeyRing.sealCheckpoint]
// for scope and key, with its data opened. An error wraps
// [ErrCannotDecrypt].
func (r *KeyRing) openCheckpoint(scope, key string, cp *retrysafe.Checkpoint) (*retrysafe.Checkpoint, error) {
	if !sealedCheckpoint(cp) {
		return nil, fmt.Errorf("%w: the stored checkpoint %q is not encrypted", ErrCannotDecrypt, cp.Name)
	}
	id, rest, ok := readString(cp.Data[len(checkpointMarker):])
	if !ok {
		return nil, fmt.Errorf("%w: the sealed checkpoint %q is malformed", ErrCannotDecrypt, cp.Name)
	}
	aead, ok := r.aeads[id]
	if !ok {
		return nil, fmt.Errorf("%w: checkpoint %q was sealed with key %q, which is not in the key ring (%s): add that key to the ring", ErrCannotDecrypt, cp.Name, id, strings.Join(r.ids, ", "))
	}
	if len(rest) < nonceSize+aead.Overhead() {
		return nil, fmt.Errorf("%w: the sealed checkpoint %q is truncated (%d bytes)", ErrCannotDecrypt, cp.Name, len(cp.Data))
	}
	data, err := aead.Open(nil, rest[:nonceSize], rest[nonceSize:], checkpointAAD(id, scope, key, cp.Name))
	if err != nil {
		return nil, fmt.Errorf("%w: authentication of checkpoint %q with key %q failed: the stored record was altered, copied from another scope or key, or renamed", ErrCannotDecrypt, cp.Name, id)
	}
	c := *cp
	c.Data = data
	return &c, nil
}

// checkpointAAD is the associated data of a sealed checkpoint: a label
// (not the response's, so neither opens as the other), the key id, the
// scope, the idempotency key and the name, each length-prefixed.
func checkpointAAD(id, scope, key, name string) []byte {
	b := make([]byte, 0, 40+len(id)+len(scope)+len(key)+len(name))
	b = append(b, "retrysafe sealed checkpoint v1"...)
	for _, s := range []string{id, scope, key, name} {
		b = appendString(b, s)
	}
	return b
}

// errMarkedCheckpoint refuses, without a ring, data that would read back
// as sealed.
var errMarkedCheckpoint = errors.New("sealed: checkpoint data starts with the marker of a sealed checkpoint, which only a key ring writes")

// SealExtend returns a copy of p for a store's CheckpointTx (which writes
// what it is given) when the store is read through [New] with this ring:
// its Scope is the stored one ([KeyRing.Scope]) and its Checkpoint's data
// sealed for it, p's key and the checkpoint's name.
func (r *KeyRing) SealExtend(p *retrysafe.ExtendParams) (*retrysafe.ExtendParams, error) {
	if p == nil {
		return nil, errors.New("sealed: nil ExtendParams")
	}
	return r.sealExtendAt(p, r.index.scope(p.Scope)), nil
}

// sealExtendAt returns a copy of p for the record kept under scope, its
// checkpoint sealed for it.
func (r *KeyRing) sealExtendAt(p *retrysafe.ExtendParams, scope string) *retrysafe.ExtendParams {
	c := *p
	c.Scope = scope
	c.Checkpoint = r.sealCheckpoint(scope, p.Key, p.Checkpoint)
	return &c
}

// openCheckpoint returns the readable form of a stored checkpoint. scope
// is the stored scope, which a sealed checkpoint is bound to.
func (s *store) openCheckpoint(scope, key string, cp *retrysafe.Checkpoint) (*retrysafe.Checkpoint, error) {
	switch {
	case cp == nil:
		return nil, nil
	case s.ring == nil && sealedCheckpoint(cp):
		return nil, fmt.Errorf("%w: checkpoint %q is sealed and no key ring is configured (retrysafe serve: --encryption-keys-file or RETRYSAFE_ENCRYPTION_KEYS)", ErrCannotDecrypt, cp.Name)
	case s.ring == nil, !sealedCheckpoint(cp) && s.cfg.AcceptPlaintext:
		return cp, nil
	}
	return s.ring.openCheckpoint(scope, key, cp)
}
