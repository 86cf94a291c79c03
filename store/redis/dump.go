package redis

import "encoding/binary"

// A new record can be written without a script: RESTORE key ttl payload
// creates the key only when it is absent (BUSYKEY otherwise), with its
// expiry, in one native command. The payload is what DUMP returns for a
// hash: the object in RDB encoding, the RDB version and a CRC-64 of both.
// The store writes the plain RDB hash type (a count of pairs, then each
// field and value as a length-prefixed string), which every Redis since
// 2.6 loads, into the same hash encoding (listpack or hashtable) that
// HSET would have chosen.
const (
	rdbTypeHash = 4
	// dumpRDBVersion is the RDB version in the payload's footer. A server
	// refuses payloads newer than its own format; 9 is Redis 5.0's.
	dumpRDBVersion = 9
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
