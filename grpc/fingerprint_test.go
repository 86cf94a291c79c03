package retrysafegrpc_test

import (
	"testing"

	retrysafegrpc "github.com/retrysafe/retrysafe/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/typepb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func fp(t *testing.T, method string, m proto.Message) string {
	t.Helper()
	s, err := retrysafegrpc.Fingerprint(method, m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// structOf builds a Struct by adding members in the given order.
func structOf(order []string, values map[string]float64) *structpb.Struct {
	s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, k := range order {
		s.Fields[k] = structpb.NewNumberValue(values[k])
	}
	return s
}

// unknown returns raw unknown fields: a varint field and a string field.
func unknown(num protowire.Number, v uint64) []byte {
	b := protowire.AppendTag(nil, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func withUnknown(m proto.Message, raw ...[]byte) proto.Message {
	var all []byte
	for _, r := range raw {
		all = append(all, r...)
	}
	m.ProtoReflect().SetUnknown(all)
	return m
}

func TestFingerprintEqualMessages(t *testing.T) {
	t.Parallel()
	vals := map[string]float64{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}
	a := structOf([]string{"a", "b", "c", "d", "e"}, vals)
	b := structOf([]string{"e", "d", "c", "b", "a"}, vals)
	// Rebuilt from wire bytes in another order of map entries.
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	c := new(structpb.Struct)
	if err := proto.Unmarshal(raw, c); err != nil {
		t.Fatal(err)
	}
	m := "/p.v1.P/Charge"
	if fa, fb, fc := fp(t, m, a), fp(t, m, b), fp(t, m, c); fa != fb || fa != fc {
		t.Fatalf("equal structs: %s %s %s", fa, fb, fc)
	}

	// Unknown fields of different numbers, added in another order.
	u1, u2 := unknown(100, 7), unknown(200, 8)
	x := withUnknown(&wrapperspb.StringValue{Value: "v"}, u1, u2)
	y := withUnknown(&wrapperspb.StringValue{Value: "v"}, u2, u1)
	if fp(t, m, x) != fp(t, m, y) {
		t.Fatal("unknown-field order changed the fingerprint")
	}

	// A proto3 scalar set to its zero value is the same as unset.
	if fp(t, m, &wrapperspb.Int64Value{Value: 0}) != fp(t, m, &wrapperspb.Int64Value{}) {
		t.Fatal("explicit zero differs from unset")
	}
	// A nil request and an empty one.
	if fp(t, m, nil) != fp(t, m, &wrapperspb.Int64Value{}) {
		t.Fatal("nil differs from empty")
	}

}

// Canonical bytes of a field known to the schema equal its unknown form:
// the fingerprint of a message with field 1 = 300 does not depend on
// whether the server's build knows field 1.
func TestFingerprintKnownEqualsUnknownScalar(t *testing.T) {
	t.Parallel()
	m := "/p.v1.P/Charge"
	known := &wrapperspb.UInt64Value{Value: 300}
	raw, err := proto.Marshal(known)
	if err != nil {
		t.Fatal(err)
	}
	e := withUnknown(&emptypb.Empty{}, raw) // the same field, unknown to Empty
	if fp(t, m, known) != fp(t, m, e) {
		t.Fatal("a known scalar field fingerprints differently from its unknown form")
	}
}

func TestFingerprintDifferences(t *testing.T) {
	t.Parallel()
	m := "/p.v1.P/Charge"
	base := fp(t, m, &wrapperspb.StringValue{Value: "a"})
	for name, other := range map[string]string{
		"value":         fp(t, m, &wrapperspb.StringValue{Value: "b"}),
		"method":        fp(t, "/p.v1.P/Refund", &wrapperspb.StringValue{Value: "a"}),
		"unknown field": fp(t, m, withUnknown(&wrapperspb.StringValue{Value: "a"}, unknown(9, 1))),
		"number moved":  fp(t, m, &typepb.Option{Name: "a"}), // field 1 string in another type: same bytes
	} {
		if name == "number moved" {
			if other != base {
				t.Errorf("%s: the same wire content must fingerprint equal across types", name)
			}
			continue
		}
		if other == base {
			t.Errorf("%s: fingerprints equal", name)
		}
	}
	// Repeated order matters; map order does not.
	l1, _ := structpb.NewList([]any{1, 2})
	l2, _ := structpb.NewList([]any{2, 1})
	if fp(t, m, l1) == fp(t, m, l2) {
		t.Error("list order ignored")
	}
	// Unknown fields of one number keep their order (a repeated field).
	x := withUnknown(&wrapperspb.StringValue{}, unknown(5, 1), unknown(5, 2))
	y := withUnknown(&wrapperspb.StringValue{}, unknown(5, 2), unknown(5, 1))
	if fp(t, m, x) == fp(t, m, y) {
		t.Error("order within one unknown number ignored")
	}
}

// The fingerprint is pinned: a change of the canonical encoding must come
// with a new version (fingerprintVersion), which changes this value.
func TestFingerprintGolden(t *testing.T) {
	t.Parallel()
	s, _ := structpb.NewStruct(map[string]any{"amount": 42, "currency": "EUR", "tags": []any{"a", true, nil}})
	const want = "df21ddf741686186233ffc71c1643275cef99bb001c401aba1fe2d090cfd6751"
	if got := fp(t, "/payments.v1.Payments/Charge", s); got != want {
		t.Fatalf("fingerprint = %s, want %s", got, want)
	}
}

// An Any's value is encoded by whoever packed it: two packings of one
// Struct, map entries in different orders, fingerprint equal.
func TestFingerprintAnyCanonical(t *testing.T) {
	t.Parallel()
	entry := func(k string, v float64) []byte {
		val, _ := proto.Marshal(structpb.NewNumberValue(v))
		e := protowire.AppendTag(nil, 1, protowire.BytesType)
		e = protowire.AppendString(e, k)
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendBytes(e, val)
		b := protowire.AppendTag(nil, 1, protowire.BytesType)
		return protowire.AppendBytes(b, e)
	}
	ab := append(entry("a", 1), entry("b", 2)...)
	ba := append(entry("b", 2), entry("a", 1)...)
	url := "type.googleapis.com/google.protobuf.Struct"
	m := "/p.v1.P/Charge"
	x, y := &anypb.Any{TypeUrl: url, Value: ab}, &anypb.Any{TypeUrl: url, Value: ba}
	if fp(t, m, x) != fp(t, m, y) {
		t.Fatal("an Any's value order changed the fingerprint")
	}
	z := &anypb.Any{TypeUrl: url, Value: append(entry("a", 1), entry("b", 3)...)}
	if fp(t, m, x) == fp(t, m, z) {
		t.Fatal("different Any values fingerprint equal")
	}
	// An unknown type is hashed as its bytes.
	u1, u2 := &anypb.Any{TypeUrl: "type.googleapis.com/x.Unknown", Value: ab}, &anypb.Any{TypeUrl: "type.googleapis.com/x.Unknown", Value: ba}
	if fp(t, m, u1) == fp(t, m, u2) {
		t.Fatal("unknown Any types must be hashed as bytes")
	}
}

// FuzzFingerprintReencode: a message that decodes fingerprints the same
// after it is encoded again (maps in another order, unknown fields moved
// after the known ones) and decoded.
func FuzzFingerprintReencode(f *testing.F) {
	s, _ := structpb.NewStruct(map[string]any{"a": 1, "b": "x", "c": []any{true, nil}, "d": map[string]any{"e": 2}})
	seed, _ := proto.Marshal(s)
	f.Add(seed)
	f.Add(append(unknown(9, 1), seed...))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range []proto.Message{new(structpb.Struct), new(typepb.Type)} {
			if proto.Unmarshal(b, m) != nil {
				continue
			}
			again, err := proto.Marshal(m)
			if err != nil {
				continue
			}
			m2 := m.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(again, m2); err != nil {
				t.Fatal(err)
			}
			f1, err1 := retrysafegrpc.Fingerprint("/m", m)
			f2, err2 := retrysafegrpc.Fingerprint("/m", m2)
			if err1 != nil || err2 != nil || f1 != f2 {
				t.Fatalf("%T: %s (%v) vs %s (%v)", m, f1, err1, f2, err2)
			}
		}
	})
}
