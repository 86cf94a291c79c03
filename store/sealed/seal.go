package sealed

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/retrysafe/retrysafe"
)

// ErrCannotDecrypt is wrapped by every error about a stored response that
// cannot be opened: its key id is not in the ring, it fails authentication
// (altered, or moved to another record), it is malformed, or it is not
// encrypted where encryption is required.
var ErrCannotDecrypt = errors.New("sealed: stored response cannot be decrypted")

// HeaderPlaceholder is the one value each header name keeps in the store
// once its values are sealed: the names stay visible to operators, the
// values are in the sealed body.
const HeaderPlaceholder = "(sealed)"

// MarkerHeader is the stored header that marks a sealed response; its one
// value is the id of the key that sealed it. Only the wrapper sets it:
// its name holds parentheses, which no HTTP header field name may hold,
// so no upstream answer carries it (Go's HTTP client refuses such a
// response), and the wrapper drops it from any response it stores in the
// clear. A response is sealed because it carries this header, never
// because of what its body looks like.
const MarkerHeader = "(retrysafe sealed)"

// A sealed response keeps its status, one [HeaderPlaceholder] value per
// header name and [MarkerHeader]; its body is
//
//	nonce(12) | AES-256-GCM(plaintext, aad)
//
// where plaintext is the header (names and values) followed by the body,
// and aad binds the key id, scope, idempotency key and status.
const nonceSize = 12

// KeyID reports whether resp holds a sealed response (it carries
// [MarkerHeader]), and the id of the key that sealed it. It needs no key
// ring, so it tells an operator that a body is encrypted rather than
// letting ciphertext pass for the body.
func KeyID(resp *retrysafe.Response) (string, bool) {
	if resp == nil {
		return "", false
	}
	v, ok := resp.Header[MarkerHeader]
	if !ok {
		return "", false
	}
	if len(v) != 1 {
		return "", true // marked, but not by this format: Open refuses it
	}
	return v[0], true
}

// Seal returns a copy of resp whose header values and body are encrypted
// under the ring's newest key, bound to scope and key. nil seals to nil.
func (r *KeyRing) Seal(scope, key string, resp *retrysafe.Response) (*retrysafe.Response, error) {
	if resp == nil {
		return nil, nil
	}
	id := r.Newest()
	names := headerNames(resp.Header)
	body := make([]byte, nonceSize, nonceSize+plainSize(names, resp.Header, resp.Body)+r.newest.Overhead())
	nonce := body[:nonceSize]
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails on supported platforms
	body = appendPlain(body, names, resp.Header, resp.Body)
	// Encrypt in place: the ciphertext overwrites the plaintext after the nonce.
	body = r.newest.Seal(body[:nonceSize], nonce, body[nonceSize:], aad(id, scope, key, resp.Status))

	out := &retrysafe.Response{Status: resp.Status, Header: make(http.Header, len(names)+1), Body: body}
	for _, name := range names {
		out.Header[name] = []string{HeaderPlaceholder}
	}
	out.Header[MarkerHeader] = []string{id}
	return out, nil
}

// Open returns the response that [KeyRing.Seal] sealed for scope and key,
// with its original headers and body. An error wraps [ErrCannotDecrypt]:
// resp is not sealed, names a key not in the ring, or fails
// authentication. nil opens to nil.
func (r *KeyRing) Open(scope, key string, resp *retrysafe.Response) (*retrysafe.Response, error) {
	if resp == nil {
		return nil, nil
	}
	id, ok := KeyID(resp)
	if !ok {
		return nil, fmt.Errorf("%w: the stored response is not encrypted", ErrCannotDecrypt)
	}
	aead, ok := r.aeads[id]
	if !ok {
		return nil, fmt.Errorf("%w: it was sealed with key %q, which is not in the key ring (%s): add that key to the ring", ErrCannotDecrypt, id, strings.Join(r.ids, ", "))
	}
	rest := resp.Body
	if len(rest) < nonceSize+aead.Overhead() {
		return nil, fmt.Errorf("%w: the sealed body is truncated (%d bytes)", ErrCannotDecrypt, len(rest))
	}
	plain, err := aead.Open(nil, rest[:nonceSize], rest[nonceSize:], aad(id, scope, key, resp.Status))
	if err != nil {
		return nil, fmt.Errorf("%w: authentication with key %q failed: the stored record was altered, copied from another scope or key, or sealed by another key with the same id", ErrCannotDecrypt, id)
	}
	h, body, err := decodePlain(plain)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCannotDecrypt, err)
	}
	return &retrysafe.Response{Status: resp.Status, Header: h, Body: body}, nil
}

// SealComplete returns a copy of p for a store's CompleteTx (which writes
// what it is given) when the store is read through [New] with this ring:
// its Scope is the stored one ([KeyRing.Scope]) and its Response sealed
// for it and p's key.
func (r *KeyRing) SealComplete(p *retrysafe.CompleteParams) (*retrysafe.CompleteParams, error) {
	if p == nil {
		return nil, errors.New("sealed: nil CompleteParams")
	}
	return r.sealCompleteAt(p, r.index.scope(p.Scope))
}

// sealCompleteAt returns a copy of p for the record kept under scope,
// its Response sealed for it.
func (r *KeyRing) sealCompleteAt(p *retrysafe.CompleteParams, scope string) (*retrysafe.CompleteParams, error) {
	c := *p
	c.Scope = scope
	resp := p.Response
	if resp == nil {
		// Stores keep a nil response as an empty one: seal that, so it
		// reads back like any other.
		resp = &retrysafe.Response{}
	}
	resp, err := r.Seal(scope, p.Key, resp)
	if err != nil {
		return nil, err
	}
	c.Response = resp
	return &c, nil
}

// aad is the associated data of a sealed response: a label, the key id,
// the scope, the idempotency key and the status, each length-prefixed.
func aad(id, scope, key string, status int) []byte {
	b := make([]byte, 0, 32+len(id)+len(scope)+len(key))
	b = append(b, "retrysafe sealed response v1"...)
	for _, s := range []string{id, scope, key} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return binary.AppendVarint(b, int64(status))
}

// headerNames returns the names of h in order, without [MarkerHeader]
// (which only the wrapper sets).
func headerNames(h http.Header) []string {
	names := make([]string, 0, len(h))
	for name := range h {
		if name != MarkerHeader {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// plainSize bounds the size of the encoded header and body.
func plainSize(names []string, h http.Header, body []byte) int {
	n := binary.MaxVarintLen64 + len(body)
	for _, name := range names {
		n += 2*binary.MaxVarintLen64 + len(name)
		for _, v := range h[name] {
			n += binary.MaxVarintLen64 + len(v)
		}
	}
	return n
}

// appendPlain appends the header (names in order, each with its values)
// followed by the body.
func appendPlain(b []byte, names []string, h http.Header, body []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = appendString(b, name)
		b = binary.AppendUvarint(b, uint64(len(h[name])))
		for _, v := range h[name] {
			b = appendString(b, v)
		}
	}
	return append(b, body...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errMalformed = errors.New("the decrypted response is malformed")

// decodePlain reverses appendPlain. The body aliases plain.
func decodePlain(plain []byte) (http.Header, []byte, error) {
	count, plain, ok := readUvarint(plain)
	if !ok || count > uint64(len(plain)) {
		return nil, nil, errMalformed
	}
	var h http.Header
	if count > 0 {
		h = make(http.Header, count)
	}
	for range count {
		var name string
		var nv uint64
		if name, plain, ok = readString(plain); !ok {
			return nil, nil, errMalformed
		}
		if nv, plain, ok = readUvarint(plain); !ok || nv > uint64(len(plain)) {
			return nil, nil, errMalformed
		}
		values := make([]string, nv)
		for i := range values {
			if values[i], plain, ok = readString(plain); !ok {
				return nil, nil, errMalformed
			}
		}
		h[name] = values
	}
	if len(plain) == 0 {
		return h, nil, nil
	}
	return h, plain, nil
}

func readUvarint(b []byte) (uint64, []byte, bool) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, false
	}
	return v, b[n:], true
}

func readString(b []byte) (string, []byte, bool) {
	n, b, ok := readUvarint(b)
	if !ok || n > uint64(len(b)) {
		return "", nil, false
	}
	return string(b[:n]), b[n:], true
}
