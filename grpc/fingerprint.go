package retrysafegrpc

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// fingerprintVersion starts every fingerprint's input. Change it whenever
// the canonical encoding below changes, so that fingerprints of the old
// and the new encoding never compare equal by accident.
const fingerprintVersion = "retrysafe-grpc-fingerprint-v1"

// Fingerprint returns the hex SHA-256 fingerprint of a call to fullMethod
// (such as "/payments.v1.Payments/Charge") with request message req: what
// tells a genuine retry from another request that reuses the key.
//
// It hashes the method and a canonical encoding of req that this package
// defines (and versions), not protobuf's own marshal output: protobuf
// documents even its Deterministic marshal as stable only within one
// build, so a deploy between an attempt and its retry could otherwise turn
// the retry into a mismatch. The canonical encoding is the protobuf wire
// format written in one order:
//
//   - the fields that are set (as [protoreflect.Message.Has] says: a proto3
//     scalar set to its zero value is the same as unset), known fields,
//     extensions and unknown fields alike, ordered by field number, the
//     unknown ones kept in their own order within one number;
//   - map entries ordered by key, each written as key then value;
//   - repeated scalars packed, messages and groups written canonically in
//     turn (length-delimited, so a group and a message of the same content
//     are equal);
//   - a google.protobuf.Any whose type is registered: its value decoded
//     and written canonically in turn (an unknown type: its bytes).
//
// So equal messages fingerprint equal however they were built (the order
// in which map entries or unknown fields were added does not matter), and
// a scalar field that one build knows and another does not (it is an
// unknown field there) usually encodes alike in both, since its wire form
// is what the canonical form writes. A nil req hashes as an empty message.
func Fingerprint(fullMethod string, req protoreflect.ProtoMessage) (string, error) {
	b := make([]byte, 0, 256)
	b = appendString(b, fingerprintVersion)
	b = appendString(b, fullMethod)
	var err error
	if req != nil {
		b, err = appendCanonical(b, req.ProtoReflect())
		if err != nil {
			return "", err
		}
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// appendString appends s, length-prefixed.
func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// field is one set field of a message: a known field or extension (fd set)
// or one unknown field (raw holds its whole wire form).
type field struct {
	num protowire.Number
	fd  protoreflect.FieldDescriptor
	v   protoreflect.Value
	raw []byte
}

// appendCanonical appends m's canonical encoding (see Fingerprint).
func appendCanonical(b []byte, m protoreflect.Message) ([]byte, error) {
	if !m.IsValid() {
		return b, nil
	}
	if m.Descriptor().FullName() == anyName {
		if c, ok := canonicalAny(m); ok {
			return append(b, c...), nil
		}
	}
	var fields []field
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		fields = append(fields, field{num: fd.Number(), fd: fd, v: v})
		return true
	})
	for unknown := m.GetUnknown(); len(unknown) > 0; {
		num, _, n := protowire.ConsumeField(unknown)
		if n < 0 {
			return nil, fmt.Errorf("retrysafegrpc: fingerprint: unknown fields of %s: %w", m.Descriptor().FullName(), protowire.ParseError(n))
		}
		fields = append(fields, field{num: num, raw: unknown[:n]})
		unknown = unknown[n:]
	}
	// Stable: the unknown fields of one number keep their order (a
	// repeated field's elements), after a known field of that number.
	slices.SortStableFunc(fields, func(a, c field) int { return cmp.Compare(a.num, c.num) })
	var err error
	for _, f := range fields {
		switch {
		case f.fd == nil:
			b = append(b, f.raw...)
		case f.fd.IsMap():
			b, err = appendMap(b, f.fd, f.v.Map())
		case f.fd.IsList():
			b, err = appendList(b, f.fd, f.v.List())
		default:
			b, err = appendValue(b, f.fd, f.v)
		}
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

const anyName = "google.protobuf.Any"

// canonicalAny returns the canonical encoding of a google.protobuf.Any
// whose type is registered (protoregistry.GlobalTypes): type_url (field
// 1), then the value (field 2) decoded and written canonically, so that
// an Any holding a map encodes alike however its value was marshalled. ok
// is false for a type this build does not know, or a value that does not
// decode: the Any is then written as its fields are.
func canonicalAny(m protoreflect.Message) (b []byte, ok bool) {
	fields := m.Descriptor().Fields()
	urlField, valueField := fields.ByNumber(1), fields.ByNumber(2)
	if urlField == nil || valueField == nil || len(m.GetUnknown()) > 0 {
		return nil, false
	}
	url := m.Get(urlField).String()
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(url)
	if err != nil {
		return nil, false
	}
	v := mt.New()
	if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(m.Get(valueField).Bytes(), v.Interface()); err != nil {
		return nil, false
	}
	inner, err := appendCanonical(nil, v)
	if err != nil {
		return nil, false
	}
	if url != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, url)
	}
	if len(inner) > 0 {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, inner)
	}
	return b, true
}

// appendMap appends a map's entries ordered by key, each as one
// length-delimited entry message (key field 1, value field 2).
func appendMap(b []byte, fd protoreflect.FieldDescriptor, m protoreflect.Map) ([]byte, error) {
	keys := make([]protoreflect.MapKey, 0, m.Len())
	m.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k)
		return true
	})
	slices.SortFunc(keys, compareMapKeys)
	var entry []byte
	var err error
	for _, k := range keys {
		entry = entry[:0]
		if entry, err = appendValue(entry, fd.MapKey(), k.Value()); err != nil {
			return nil, err
		}
		if entry, err = appendValue(entry, fd.MapValue(), m.Get(k)); err != nil {
			return nil, err
		}
		b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
		b = protowire.AppendBytes(b, entry)
	}
	return b, nil
}

// compareMapKeys orders map keys of one kind: bools false first, integers
// by value, strings by bytes.
func compareMapKeys(a, c protoreflect.MapKey) int {
	switch v := a.Interface().(type) {
	case bool:
		w := c.Bool()
		switch {
		case v == w:
			return 0
		case !v:
			return -1
		}
		return 1
	case int32, int64:
		return cmp.Compare(a.Int(), c.Int())
	case uint32, uint64:
		return cmp.Compare(a.Uint(), c.Uint())
	}
	return cmp.Compare(a.String(), c.String())
}

// appendList appends a repeated field: scalars packed into one
// length-delimited field, messages one field each.
func appendList(b []byte, fd protoreflect.FieldDescriptor, l protoreflect.List) ([]byte, error) {
	var err error
	if k := fd.Kind(); k == protoreflect.MessageKind || k == protoreflect.GroupKind || k == protoreflect.StringKind || k == protoreflect.BytesKind {
		for i := range l.Len() {
			if b, err = appendValue(b, fd, l.Get(i)); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	var packed []byte
	for i := range l.Len() {
		packed = appendScalar(packed, fd.Kind(), l.Get(i))
	}
	b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
	return protowire.AppendBytes(b, packed), nil
}

// appendValue appends one value of field fd with its tag.
func appendValue(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) ([]byte, error) {
	switch k := fd.Kind(); k {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		sub, err := appendCanonical(nil, v.Message())
		if err != nil {
			return nil, err
		}
		b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
		return protowire.AppendBytes(b, sub), nil
	case protoreflect.StringKind:
		b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
		return protowire.AppendString(b, v.String()), nil
	case protoreflect.BytesKind:
		b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
		return protowire.AppendBytes(b, v.Bytes()), nil
	default:
		b = protowire.AppendTag(b, fd.Number(), wireType(k))
		return appendScalar(b, k, v), nil
	}
}

// wireType is the wire type of a scalar kind.
func wireType(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	}
	return protowire.VarintType
}

// appendScalar appends a scalar value's wire form, without tag, as
// protobuf writes it.
func appendScalar(b []byte, k protoreflect.Kind, v protoreflect.Value) []byte {
	switch k {
	case protoreflect.BoolKind:
		return protowire.AppendVarint(b, protowire.EncodeBool(v.Bool()))
	case protoreflect.EnumKind:
		return protowire.AppendVarint(b, uint64(v.Enum()))
	case protoreflect.Int32Kind, protoreflect.Int64Kind:
		return protowire.AppendVarint(b, uint64(v.Int()))
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind:
		return protowire.AppendVarint(b, v.Uint())
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return protowire.AppendVarint(b, protowire.EncodeZigZag(v.Int()))
	case protoreflect.Fixed32Kind:
		return protowire.AppendFixed32(b, uint32(v.Uint()))
	case protoreflect.Sfixed32Kind:
		return protowire.AppendFixed32(b, uint32(v.Int()))
	case protoreflect.FloatKind:
		return protowire.AppendFixed32(b, math32bits(v.Float()))
	case protoreflect.Fixed64Kind:
		return protowire.AppendFixed64(b, v.Uint())
	case protoreflect.Sfixed64Kind:
		return protowire.AppendFixed64(b, uint64(v.Int()))
	case protoreflect.DoubleKind:
		return protowire.AppendFixed64(b, math64bits(v.Float()))
	}
	return b
}

func math32bits(f float64) uint32 { return math.Float32bits(float32(f)) }
func math64bits(f float64) uint64 { return math.Float64bits(f) }
