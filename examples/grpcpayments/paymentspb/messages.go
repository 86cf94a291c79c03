package paymentspb

import (
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// CreateOrderRequest opens an order of Amount minor units (cents) of
// Currency (a 3-letter code).
type CreateOrderRequest struct {
	Amount   int64
	Currency string
}

// PayOrderRequest pays the order OrderID.
type PayOrderRequest struct{ OrderID string }

// GetOrderRequest reads the order OrderID.
type GetOrderRequest struct{ OrderID string }

// Order is an order and its status.
type Order struct {
	ID       string
	Amount   int64
	Currency string
	Status   string
}

// Payment is a payment of an order, and the provider's charge.
type Payment struct {
	ID       string
	OrderID  string
	Amount   int64
	Currency string
	Status   string
	ChargeID string
}

// message is one of the structs above: the descriptor of its message in
// File, and a pointer to each of its fields by the field's name there.
type message interface {
	descriptor() protoreflect.MessageDescriptor
	fields() map[protoreflect.Name]any // *string or *int64
}

func byName(name protoreflect.Name) protoreflect.MessageDescriptor {
	return File.Messages().ByName(name)
}

func (r *CreateOrderRequest) descriptor() protoreflect.MessageDescriptor {
	return byName("CreateOrderRequest")
}
func (r *PayOrderRequest) descriptor() protoreflect.MessageDescriptor {
	return byName("PayOrderRequest")
}
func (r *GetOrderRequest) descriptor() protoreflect.MessageDescriptor {
	return byName("GetOrderRequest")
}
func (o *Order) descriptor() protoreflect.MessageDescriptor   { return byName("Order") }
func (p *Payment) descriptor() protoreflect.MessageDescriptor { return byName("Payment") }

func (r *CreateOrderRequest) fields() map[protoreflect.Name]any {
	return map[protoreflect.Name]any{"amount": &r.Amount, "currency": &r.Currency}
}
func (r *PayOrderRequest) fields() map[protoreflect.Name]any {
	return map[protoreflect.Name]any{"order_id": &r.OrderID}
}
func (r *GetOrderRequest) fields() map[protoreflect.Name]any {
	return map[protoreflect.Name]any{"order_id": &r.OrderID}
}
func (o *Order) fields() map[protoreflect.Name]any {
	return map[protoreflect.Name]any{"id": &o.ID, "amount": &o.Amount, "currency": &o.Currency, "status": &o.Status}
}
func (p *Payment) fields() map[protoreflect.Name]any {
	return map[protoreflect.Name]any{"id": &p.ID, "order_id": &p.OrderID, "amount": &p.Amount,
		"currency": &p.Currency, "status": &p.Status, "charge_id": &p.ChargeID}
}

// encode returns x as a protobuf message.
func encode(x message) *dynamicpb.Message {
	m := dynamicpb.NewMessage(x.descriptor())
	for name, p := range x.fields() {
		fd := m.Descriptor().Fields().ByName(name)
		switch p := p.(type) {
		case *string:
			m.Set(fd, protoreflect.ValueOfString(*p))
		case *int64:
			m.Set(fd, protoreflect.ValueOfInt64(*p))
		}
	}
	return m
}

// decode sets the fields of x from m, a message of x's descriptor.
func decode(m protoreflect.Message, x message) {
	for name, p := range x.fields() {
		v := m.Get(m.Descriptor().Fields().ByName(name))
		switch p := p.(type) {
		case *string:
			*p = v.String()
		case *int64:
			*p = v.Int()
		}
	}
}
