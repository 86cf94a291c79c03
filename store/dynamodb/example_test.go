package dynamodb_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/retrysafe/retrysafe"
	rsdynamodb "github.com/retrysafe/retrysafe/store/dynamodb"
)

// A Go worker (an SQS consumer, a Lambda function) that charges each
// order once, however often its message is delivered: the store is built
// on the application's own client, and retrysafe.Do keys the charge by
// the order's id.
func ExampleNew() {
	ctx := context.Background()
	awsCfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("eu-west-1"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := rsdynamodb.New(dynamodb.NewFromConfig(awsCfg), rsdynamodb.Config{Table: "retrysafe"})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil { // usually run at deploy time
		log.Fatal(err)
	}

	orderID, amount := "order-1042", 2599
	chargeID, err := retrysafe.Do(ctx, store, orderID, fmt.Sprint(amount), func(ctx context.Context) (string, error) {
		return "ch_" + orderID, nil // the call to the payment provider
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("charge:", chargeID)
}

// Open a store from the gateway's URL form; credentials come from the
// SDK's default chain, never from the URL.
func ExampleOpen() {
	ctx := context.Background()
	s, err := rsdynamodb.Open(ctx, "dynamodb://retrysafe?region=eu-west-1", rsdynamodb.Config{})
	if err != nil {
		log.Fatal(err)
	}
	p := &retrysafe.ClaimParams{
		Scope: "tenant-hash", Key: "8e03978e-40d5-43e8-bc93-6894a57f9324", Fingerprint: "request-hash",
		Token: retrysafe.NewToken(), Now: time.Now(), Lease: 30 * time.Second,
	}
	res, err := s.Claim(ctx, p)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claimed:", res.Claimed)
}
