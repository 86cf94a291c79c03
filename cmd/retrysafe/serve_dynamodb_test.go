package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/retrysafe/retrysafe/admin"
	"github.com/retrysafe/retrysafe/internal/storeurl"
	"github.com/retrysafe/retrysafe/internal/testenv"
	rsdynamodb "github.com/retrysafe/retrysafe/store/dynamodb"
)

// dynamoDBURL returns a dynamodb:// URL of a table on the test endpoint
// that does not exist yet, deleted at the end of the test if it was made.
// Dummy credentials are set for the SDK's default chain when the
// environment has none (dynalite checks no signature).
func dynamoDBURL(t *testing.T) string {
	t.Helper()
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_PROFILE") == "" {
		_ = os.Setenv("AWS_ACCESS_KEY_ID", "retrysafe-test")
		_ = os.Setenv("AWS_SECRET_ACCESS_KEY", "retrysafe-test")
	}
	table := testenv.Name("rs_serve_")
	raw := "dynamodb://" + table + "?" + url.Values{"region": {"us-east-1"}, "endpoint": {testenv.DynamoDBEndpoint()}}.Encode()
	s, err := rsdynamodb.Open(context.Background(), raw, rsdynamodb.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Client().ListTables(ctx, &dynamodb.ListTablesInput{Limit: aws.Int32(1)}); err != nil {
		testenv.Unreachable(t, "DynamoDB at "+testenv.DynamoDBEndpoint(), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = s.Client().DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	return raw
}

// TestServeDynamoDB: retrysafe migrate creates the table of a
// dynamodb:// URL (twice: the second run finds it), then two gateways run
// on that table (checkTwoGateways).
func TestServeDynamoDB(t *testing.T) {
	t.Parallel()
	storeURL := dynamoDBURL(t)
	ctx := t.Context()
	for range 2 {
		var stdout, stderr bytes.Buffer
		if err := runMigrate(ctx, []string{"--store", storeURL, "--json"}, &stdout, &stderr, storeurl.OpenWith); err != nil {
			t.Fatalf("migrate: %v\n%s", err, stderr.String())
		}
		var res struct{ Note string }
		if err := json.Unmarshal(stdout.Bytes(), &res); err != nil || !strings.Contains(res.Note, "table ready") {
			t.Fatalf("migrate printed %s (%v)", stdout.String(), err)
		}
	}
	s, closeStore, err := storeurl.Open(ctx, storeURL)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	if err := s.(admin.Pinger).Ping(ctx); err != nil {
		t.Fatalf("the table migrate made does not answer: %v", err)
	}

	checkTwoGateways(t, s, storeURL, "dynamo")
}
