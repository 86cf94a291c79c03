package stores

import (
	"context"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/retrysafe/retrysafe/internal/testenv"
	rsdynamodb "github.com/retrysafe/retrysafe/store/dynamodb"
)

// DynamoDBRegion is the region of the test URLs (dynalite accepts any).
const DynamoDBRegion = "us-east-1"

// DynamoDBTableURL creates a fresh table on the test endpoint
// (testenv.DynamoDBEndpoint), deleted at the end of the test, and returns
// its dynamodb:// URL and name. The store finds its credentials in the
// AWS SDK's default chain: when the environment holds none, it is given
// dummy ones (dynalite checks no signature), which processes started
// afterwards inherit.
func DynamoDBTableURL(t testing.TB) (string, string) {
	t.Helper()
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_PROFILE") == "" {
		// os.Setenv, not t.Setenv: parallel tests share these values.
		_ = os.Setenv("AWS_ACCESS_KEY_ID", "retrysafe-test")
		_ = os.Setenv("AWS_SECRET_ACCESS_KEY", "retrysafe-test")
	}
	table := testenv.Name("rs_test_")
	q := url.Values{"region": {DynamoDBRegion}, "endpoint": {testenv.DynamoDBEndpoint()}}
	raw := "dynamodb://" + table + "?" + q.Encode()
	s, err := rsdynamodb.Open(context.Background(), raw, rsdynamodb.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		testenv.Unreachable(t, "DynamoDB at "+testenv.DynamoDBEndpoint(), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := s.Client().DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)}); err != nil {
			t.Errorf("delete table %s: %v", table, err)
		}
	})
	return raw, table
}

// DynamoDB returns a store on a fresh table.
func DynamoDB(t testing.TB) *rsdynamodb.Store {
	t.Helper()
	raw, _ := DynamoDBTableURL(t)
	s, err := rsdynamodb.Open(context.Background(), raw, rsdynamodb.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
