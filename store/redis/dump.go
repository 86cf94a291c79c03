package redis

import (
	"encoding/binary"
	"strconv"
)

// A new record can be written without a script: RESTORE key ttl payload
// creates the key only when it is absent (BUSYKEY otherwise), with its
// expiry, in one native command. The payload is what DUMP returns for a
// hash: the object in RDB encoding, the RDB version and a CRC-64 of both.
//
// The store writes one of two RDB hash types:
//
//   - the listpack hash (RDB 10, Redis 7.0 and later), when every field and
//     value fits the listpack limits of a default configuration: the
//     listpack itself, byte for byte the one HSET builds for the same
//     fields, which the server takes over as it is (a header check, no
//     per-field work; see listpackDump);
//   - the plain hash (a count of pairs, then each field and value as a
//     length-prefixed string), which every Redis since 2.6 loads, into the
//     same encoding (listpack or hashtable) that HSET would have chosen,
//     one field at a time; for longer values, and for a server that
//     refuses the listpack payload (older than 7.0).
const (
	rdbTypeHash         = 4
	rdbTypeHashListpack = 16
	// dumpRDBVersion is the RDB version in the plain payload's footer. A
	// server refuses payloads newer than its own format; 9 is Redis 5.0's.
	dumpRDBVersion = 9
	// dumpRDBVersionListpack is the listpack payload's: 10, Redis 7.0's,
	// the first with listpack hashes.
	dumpRDBVersionListpack = 10
)

// listpackMaxValue and listpackMaxEntries are the defaults of Redis's
// hash-max-listpack-value and hash-max-listpack-entries: HSET keeps a hash
// within both a listpack.
const (
	listpackMaxValue   = 64
	listpackMaxEntries = 128
)

// appendRDBLen appends n in RDB length encoding.
func appendRDBLen(b []byte, n int) []byte {
	switch {
	case n < 1<<6:
		return append(b, byte(n))
	case n < 1<<14:
		return append(b, byte(n>>8)|0x40, byte(n))
	case uint64(n) <= 0xffffffff:
		b = append(b, 0x80)
		return binary.BigEndian.AppendUint32(b, uint32(n))
	default:
		b = append(b, 0x81)
		return binary.BigEndian.AppendUint64(b, uint64(n))
	}
}

// appendRDBString appends s as an RDB raw string.
func appendRDBString(b []byte, s string) []byte {
	return append(appendRDBLen(b, len(s)), s...)
}

// hashDump returns the DUMP payload of a hash with the given fields and
// values (pairs: field, value, field, value, …).
func hashDump(pairs ...string) string {
	n := 1 + 9 + 10
	for _, s := range pairs {
		n += 5 + len(s)
	}
	b := make([]byte, 0, n)
	b = append(b, rdbTypeHash)
	b = appendRDBLen(b, len(pairs)/2)
	for _, s := range pairs {
		b = appendRDBString(b, s)
	}
	b = binary.LittleEndian.AppendUint16(b, dumpRDBVersion)
	b = binary.LittleEndian.AppendUint64(b, crc64Jones(b))
	return string(b)
}

// listpackDump returns the DUMP payload of a listpack hash with the given
// fields and values (pairs: field, value, …), or false when one of them is
// longer than listpackMaxValue or there are more than listpackMaxEntries
// pairs (HSET would build a hashtable; use hashDump).
//
// A listpack is a 6-byte header (total bytes and element count, little
// endian), the elements, and an end byte 0xFF. Each element is its encoding
// and data, then its own length as a back-length (one byte below 128, which
// covers every element here: at most 2 + 64 bytes). HSET stores a string
// that is a canonical decimal int64 as an integer (lpStringToInt64), the
// others as strings; listpackDump does the same, so the listpack is the one
// HSET would have built and DUMP of either key gives the same bytes
// (TestListpackDumpMatchesHSET).
//
// Redis takes such a payload over after checking the header only, unless
// sanitize-dump-payload is on, which validates every element too.
func listpackDump(pairs ...string) (string, bool) {
	if len(pairs)/2 > listpackMaxEntries {
		return "", false
	}
	lpLen := 6 + 1 // header, end byte
	for _, s := range pairs {
		if len(s) > listpackMaxValue {
			return "", false
		}
		lpLen += lpEntryLen(s) + 1 // + back-length
	}
	b := make([]byte, 0, 1+5+lpLen+10)
	b = append(b, rdbTypeHashListpack)
	b = appendRDBLen(b, lpLen)
	b = binary.LittleEndian.AppendUint32(b, uint32(lpLen))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(pairs)))
	for _, s := range pairs {
		start := len(b)
		b = appendLPEntry(b, s)
		b = append(b, byte(len(b)-start))
	}
	b = append(b, 0xff)
	b = binary.LittleEndian.AppendUint16(b, dumpRDBVersionListpack)
	b = binary.LittleEndian.AppendUint64(b, crc64Jones(b))
	return string(b), true
}

// lpInt reports whether a listpack stores s as an integer, and which: s is
// the canonical decimal form of an int64 (no sign but '-', no leading
// zero, not "-0"), as Redis's lpStringToInt64 decides.
func lpInt(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 20 {
		return 0, false
	}
	digits := s
	if s[0] == '-' {
		digits = s[1:]
	}
	if len(digits) == 0 || digits[0] < '0' || digits[0] > '9' || (digits[0] == '0' && len(s) > 1) {
		return 0, false
	}
	for i := 1; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 64) // range
	return v, err == nil
}

// lpEntryLen is the length of s's element in a listpack, without its
// back-length; s is at most listpackMaxValue bytes.
func lpEntryLen(s string) int {
	v, ok := lpInt(s)
	switch {
	case ok:
		return lpIntLen(v)
	case len(s) < 64:
		return 1 + len(s)
	}
	return 2 + len(s)
}

// lpIntLen is the length of v's listpack element without its back-length.
func lpIntLen(v int64) int {
	switch {
	case v >= 0 && v <= 127:
		return 1
	case v >= -4096 && v <= 4095:
		return 2
	case v >= -32768 && v <= 32767:
		return 3
	case v >= -8388608 && v <= 8388607:
		return 4
	case v >= -2147483648 && v <= 2147483647:
		return 5
	}
	return 9
}

// appendLPEntry appends s's listpack element without its back-length,
// in the encoding lpEntryLen counts.
func appendLPEntry(b []byte, s string) []byte {
	v, ok := lpInt(s)
	if !ok {
		if len(s) < 64 {
			b = append(b, 0x80|byte(len(s))) // 6-bit length string
		} else {
			b = append(b, 0xe0|byte(len(s)>>8), byte(len(s))) // 12-bit length string
		}
		return append(b, s...)
	}
	u := uint64(v) // two's complement: the low bytes are the encodings'
	switch lpIntLen(v) {
	case 1:
		return append(b, byte(v)) // 7-bit unsigned
	case 2:
		return append(b, 0xc0|byte(u>>8)&0x1f, byte(u)) // 13-bit signed
	case 3:
		return append(b, 0xf1, byte(u), byte(u>>8))
	case 4:
		return append(b, 0xf2, byte(u), byte(u>>8), byte(u>>16))
	case 5:
		return binary.LittleEndian.AppendUint32(append(b, 0xf3), uint32(u))
	}
	return binary.LittleEndian.AppendUint64(append(b, 0xf4), u)
}

// crc64JonesTables are the tables of Redis's CRC-64 (Jones polynomial,
// reflected, initial value and final XOR 0), which checks DUMP payloads,
// for eight bytes at a time: [0] is the byte-wise table, [k] advances a
// byte's remainder by k more bytes.
var crc64JonesTables = func() (t [8][256]uint64) {
	const poly = 0x95ac9329ac4bc9b5 // 0xad93d23594c935a9, bit-reversed
	for i := range t[0] {
		c := uint64(i)
		for range 8 {
			if c&1 == 1 {
				c = c>>1 ^ poly
			} else {
				c >>= 1
			}
		}
		t[0][i] = c
	}
	for i := range t[0] {
		for k := 1; k < 8; k++ {
			t[k][i] = t[0][byte(t[k-1][i])] ^ t[k-1][i]>>8
		}
	}
	return t
}()

// crc64Jones returns Redis's crc64(0, b).
func crc64Jones(b []byte) uint64 {
	t := &crc64JonesTables
	var c uint64
	for len(b) >= 8 {
		c ^= binary.LittleEndian.Uint64(b)
		c = t[7][byte(c)] ^ t[6][byte(c>>8)] ^ t[5][byte(c>>16)] ^ t[4][byte(c>>24)] ^
			t[3][byte(c>>32)] ^ t[2][byte(c>>40)] ^ t[1][byte(c>>48)] ^ t[0][byte(c>>56)]
		b = b[8:]
	}
	for _, x := range b {
		c = t[0][byte(c)^x] ^ c>>8
	}
	return c
}
