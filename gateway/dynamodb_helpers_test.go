package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
	rsdynamodb "github.com/retrysafe/retrysafe/store/dynamodb"
)

// dynamoDBKind is the storeKind of DynamoDB (dynalite in CI): a table of
// its own per test, deleted at its end; each open is a store on a client
// of its own, as another gateway instance would have.
var dynamoDBKind = storeKind{name: "dynamodb", shared: func(t *testing.T) func(t *testing.T) retrysafe.Store {
	newClient := func() *dynamodb.Client {
		return dynamodb.New(dynamodb.Options{
			Region:       "us-east-1",
			BaseEndpoint: aws.String(testenv.DynamoDBEndpoint()),
			Credentials:  credentials.NewStaticCredentialsProvider("retrysafe-test", "retrysafe-test", ""),
		})
	}
	client := newClient()
	table := "gw_" + randomHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.ListTables(ctx, &dynamodb.ListTablesInput{Limit: aws.Int32(1)}); err != nil {
		testenv.Unreachable(t, "DynamoDB at "+testenv.DynamoDBEndpoint(), err)
	}
	if err := rsdynamodb.CreateTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	return func(t *testing.T) retrysafe.Store {
		s, err := rsdynamodb.New(newClient(), rsdynamodb.Config{Table: table})
		if err != nil {
			t.Fatalf("dynamodb.New: %v", err)
		}
		return s
	}
}}
