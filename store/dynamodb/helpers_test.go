package dynamodb_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/retrysafe/retrysafe/internal/testenv"
	rsdynamodb "github.com/retrysafe/retrysafe/store/dynamodb"
)

// newClient returns a client on the test endpoint (RETRYSAFE_DYNAMODB_ENDPOINT)
// with dummy credentials, sending its requests through rt when not nil.
func newClient(t testing.TB, endpoint string, rt http.RoundTripper, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	t.Helper()
	o := dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("retrysafe-test", "retrysafe-test", ""),
	}
	if rt != nil {
		o.HTTPClient = &http.Client{Transport: rt}
	}
	return dynamodb.New(o, opts...)
}

// newTable creates a table of its own for t on the test endpoint, deleted
// when t ends; a missing endpoint skips t (fails it under CI=true).
func newTable(t testing.TB) string {
	t.Helper()
	client := newClient(t, testenv.DynamoDBEndpoint(), nil)
	table := testenv.Name("retrysafe_test_")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.ListTables(ctx, &dynamodb.ListTablesInput{Limit: aws.Int32(1)}); err != nil {
		testenv.Unreachable(t, "DynamoDB ("+testenv.DynamoDBEndpoint()+")", err)
	}
	if err := rsdynamodb.CreateTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)}); err != nil {
			t.Errorf("delete table %s: %v", table, err)
		}
	})
	return table
}

// newStoreOn returns a store on table through a client of its own.
func newStoreOn(t testing.TB, table string, rt http.RoundTripper) *rsdynamodb.Store {
	t.Helper()
	s, err := rsdynamodb.New(newClient(t, testenv.DynamoDBEndpoint(), rt), rsdynamodb.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newStore returns a store on a fresh table.
func newStore(t testing.TB) *rsdynamodb.Store { return newStoreOn(t, newTable(t), nil) }

func endpoint() string { return testenv.DynamoDBEndpoint() }
