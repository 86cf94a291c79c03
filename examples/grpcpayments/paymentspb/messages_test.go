package paymentspb

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Each struct binds every field of its message, by a name the message
// has, and comes back the same from the wire.
func TestMessagesRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, out message }{
		{&CreateOrderRequest{Amount: 1250, Currency: "EUR"}, &CreateOrderRequest{}},
		{&PayOrderRequest{OrderID: "ord_1"}, &PayOrderRequest{}},
		{&GetOrderRequest{OrderID: "ord_2"}, &GetOrderRequest{}},
		{&Order{ID: "ord_3", Amount: -7, Currency: "USD", Status: "open"}, &Order{}},
		{&Payment{ID: "pay_1", OrderID: "ord_4", Amount: 9, Currency: "JPY", Status: "succeeded", ChargeID: "ch_1"}, &Payment{}},
	} {
		md := tc.in.descriptor()
		if md == nil {
			t.Fatalf("%T: no descriptor", tc.in)
		}
		if got, want := len(tc.in.fields()), md.Fields().Len(); got != want {
			t.Errorf("%s: %d fields bound, the message has %d", md.Name(), got, want)
		}
		for name := range tc.in.fields() {
			if md.Fields().ByName(name) == nil {
				t.Errorf("%s has no field %s", md.Name(), name)
			}
		}
		b, err := proto.Marshal(encode(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		m := dynamicpb.NewMessage(md)
		if err := proto.Unmarshal(b, m); err != nil {
			t.Fatal(err)
		}
		decode(m, tc.out)
		if got, want := tc.out.fields(), tc.in.fields(); len(got) != len(want) {
			t.Fatalf("%s: bindings differ", md.Name())
		}
		for name, p := range tc.in.fields() {
			if got, want := deref(tc.out.fields()[name]), deref(p); got != want {
				t.Errorf("%s.%s = %v after the round trip, want %v", md.Name(), name, got, want)
			}
		}
	}
}

func deref(p any) any {
	switch p := p.(type) {
	case *string:
		return *p
	case *int64:
		return *p
	}
	return p
}
