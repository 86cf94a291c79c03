package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/examples/grpcpayments/paymentspb"
	"github.com/retrysafe/retrysafe/examples/payments/repo"
	retrysafegrpc "github.com/retrysafe/retrysafe/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// service implements the Payments service on the payments example's
// repository: its orders and payments tables, their unique indexes and
// status transitions (one successful payment per order), and the audit
// log. The server interceptor in front runs each keyed call once; the
// handlers make a re-run safe too (a takeover after a crash, say): each
// write is tagged with the operation's key and found again by it.
type service struct {
	db  *repo.DB
	now func() time.Time
}

// opKey identifies the operation in ctx (its scope and key) in the rows it
// writes; "" outside an operation (the call was not keyed).
func opKey(ctx context.Context) string {
	op := retrysafe.OperationFromContext(ctx)
	if op == nil {
		return ""
	}
	sum := sha256.Sum256([]byte(op.Scope() + "\n" + op.Key()))
	return hex.EncodeToString(sum[:])
}

func (s *service) CreateOrder(ctx context.Context, req *paymentspb.CreateOrderRequest) (*paymentspb.Order, error) {
	if req.Amount <= 0 || len(req.Currency) != 3 {
		return nil, status.Error(codes.InvalidArgument, "amount must be positive and currency a 3-letter code")
	}
	key := opKey(ctx)
	if key == "" {
		return nil, status.Error(codes.InvalidArgument, "send CreateOrder with an idempotency-key")
	}
	var o *repo.Order
	err := s.db.InTx(ctx, func(tx *repo.Tx) error {
		if found, err := tx.OrderByOpKey(ctx, key); err == nil {
			o = found // a re-run of this operation
			return nil
		} else if !repo.IsNotFound(err) {
			return err
		}
		now := s.now()
		o = &repo.Order{ID: repo.NewID("ord", now), Amount: req.Amount, Currency: req.Currency, CreatedAt: now}
		return tx.InsertOrder(ctx, o, key)
	})
	if err != nil {
		return nil, status.Errorf(codes.Internal, "creating the order: %v", err)
	}
	return orderMessage(o), nil
}

func (s *service) PayOrder(ctx context.Context, req *paymentspb.PayOrderRequest) (*paymentspb.Payment, error) {
	key := opKey(ctx)
	if key == "" {
		return nil, status.Error(codes.InvalidArgument, "send PayOrder with an idempotency-key")
	}
	// The key of the provider call, derived from this operation: a re-run
	// asks the provider with the same key, which answers with the same
	// charge.
	providerKey, _ := retrysafegrpc.DeriveKey(ctx, "psp-charge")
	var pay *repo.Payment
	var refusal error
	err := s.db.InTx(ctx, func(tx *repo.Tx) error {
		if p, err := tx.PaymentByOpKey(ctx, key); err == nil {
			pay = p
			return nil
		} else if !repo.IsNotFound(err) {
			return err
		}
		order, err := tx.Order(ctx, req.OrderID)
		if repo.IsNotFound(err) {
			refusal = status.Error(codes.NotFound, "no such order")
			return refusal
		}
		if err != nil {
			return err
		}
		if order.Status != repo.OrderOpen {
			// Business state, whatever the key: a paid order is not paid again.
			refusal = status.Errorf(codes.FailedPrecondition, "the order is %s", order.Status)
			return refusal
		}
		now := s.now()
		pay = &repo.Payment{ID: repo.NewID("pay", now), OrderID: order.ID, OpKey: key, ProviderKey: providerKey,
			Amount: order.Amount, Currency: order.Currency, CreatedAt: now}
		if err := tx.TransitionOrder(ctx, order.ID, repo.OrderPaying, "payment "+pay.ID+" started", now); err != nil {
			return err
		}
		if err := tx.InsertPayment(ctx, pay); err != nil {
			return err
		}
		// The provider: charged by the derived key (simulated here; see
		// examples/payments for a real call through client.Transport).
		pay.ChargeID = "ch_" + providerKey[len(providerKey)-16:]
		if err := tx.TransitionPayment(ctx, pay.ID, repo.PaymentSucceeded, "charged", repo.PaymentChange{ChargeID: pay.ChargeID}, now); err != nil {
			return err
		}
		pay.Status = repo.PaymentSucceeded
		return tx.TransitionOrder(ctx, order.ID, repo.OrderPaid, "payment "+pay.ID+" succeeded", now)
	})
	switch {
	case refusal != nil:
		return nil, refusal
	case errors.Is(err, repo.ErrUnique), errors.Is(err, repo.ErrTransition):
		return nil, status.Error(codes.FailedPrecondition, "the order is being paid or paid already")
	case err != nil:
		return nil, status.Errorf(codes.Internal, "paying the order: %v", err)
	}
	return &paymentspb.Payment{ID: pay.ID, OrderID: pay.OrderID, Amount: pay.Amount, Currency: pay.Currency,
		Status: pay.Status, ChargeID: pay.ChargeID}, nil
}

func (s *service) GetOrder(ctx context.Context, req *paymentspb.GetOrderRequest) (*paymentspb.Order, error) {
	o, err := s.db.Read().Order(ctx, req.OrderID)
	switch {
	case repo.IsNotFound(err):
		return nil, status.Error(codes.NotFound, "no such order")
	case err != nil:
		return nil, status.Errorf(codes.Internal, "reading the order: %v", err)
	}
	return orderMessage(o), nil
}

func orderMessage(o *repo.Order) *paymentspb.Order {
	return &paymentspb.Order{ID: o.ID, Amount: o.Amount, Currency: o.Currency, Status: o.Status}
}
