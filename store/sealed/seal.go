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

// A sealed body is
//
//	magic(4) | len(id)(1) | id | nonce(12) | AES-256-GCM(plaintext, aad)
//
// where plaintext is the header (names and values) followed by the body,
// and aad binds the key id, scope, idempotency key and status. The magic
// starts with 0xFF, which no UTF-8 text (JSON, HTML) starts with.
var magic = []byte{0xFF, 'R', 'S', 1}

const nonceSize = 12

// KeyID reports whether resp holds a sealed response, and the id of the key
// that sealed it. It reads only the format, without a key ring, so it tells
// an operator that a body is encrypted rather than letting ciphertext pass
// for the body.
func KeyID(resp *retrysafe.Response) (string, bool) {
	if resp == nil {
		return "", false
	}
	id, _, ok := splitSealed(resp.Body)
	return id, ok
}

// splitSealed returns the key id and the nonce+ciphertext of a sealed body.
func splitSealed(body []byte) (id string, rest []byte, ok bool) {
	if len(body) < len(magic)+1 || string(body[:len(magic)]) != string(magic) {
		return "", nil, false
	}
	n := int(body[len(magic)])
	body = body[len(magic)+1:]
	if n == 0 || n > maxKeyIDLen || len(body) < n {
		return "", nil, false
	}
	return string(body[:n]), body[n:], true
}

// Seal returns a copy of resp whose header values and body are encrypted
// under the ring's newest key, bound to scope and key. nil seals to nil.
func (r *KeyRing) Seal(scope, key string, resp *retrysafe.Response) (*retrysafe.Response, error) {
	if resp == nil {
		return nil, nil
	}
	id := r.Newest()
	names := headerNames(resp.Header)
	prefix := len(magic) + 1 + len(id) + nonceSize
	body := make([]byte, prefix, prefix+plainSize(names, resp.Header, resp.Body)+r.newest.Overhead())
	copy(body, magic)
	body[len(magic)] = byte(len(id))
	copy(body[len(magic)+1:], id)
	nonce := body[prefix-nonceSize : prefix]
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails on supported platforms
	body = appendPlain(body, names, resp.Header, resp.Body)
	// Encrypt in place: the ciphertext overwrites the plaintext after the prefix.
	body = r.newest.Seal(body[:prefix], nonce, body[prefix:], aad(id, scope, key, resp.Status))

	out := &retrysafe.Response{Status: resp.Status, Body: body}
	if len(names) > 0 {
		out.Header = make(http.Header, len(names))
		for _, name := range names {
			out.Header[name] = []string{HeaderPlaceholder}
		}
	}
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
	id, rest, ok := splitSealed(resp.Body)
	if !ok {
		return nil, fmt.Errorf("%w: the stored response is not encrypted", ErrCannotDecrypt)
	}
	aead, ok := r.aeads[id]
	if !ok {
		return nil, fmt.Errorf("%w: it was sealed with key %q, which is not in the key ring (%s): add that key to the ring", ErrCannotDecrypt, id, strings.Join(r.ids, ", "))
	}
	if len(rest) < nonceSize+aead.Overhead() {
		return nil, fmt.Errorf("%w: the sealed body is truncated (%d bytes after the key id)", ErrCannotDecrypt, len(rest))
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

// SealComplete returns a copy of p whose Response is sealed for p's scope
// and key, for a store's CompleteTx (which writes what it is given) when
// the store is read through [New] with this ring.
func (r *KeyRing) SealComplete(p *retrysafe.CompleteParams) (*retrysafe.CompleteParams, error) {
	if p == nil {
		return nil, errors.New("sealed: nil CompleteParams")
	}
	c := *p
	resp := p.Response
	if resp == nil {
		// Stores keep a nil response as an empty one: seal that, so it
		// reads back like any other.
		resp = &retrysafe.Response{}
	}
	resp, err := r.Seal(p.Scope, p.Key, resp)
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

func headerNames(h http.Header) []string {
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
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
