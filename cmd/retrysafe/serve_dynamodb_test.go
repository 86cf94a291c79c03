package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/retrysafe/retrysafe"
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
// dynamodb:// URL (twice: the second run finds it), then two gateways
// (serve, in-process) on that table, as two instances behind a load
// balancer: concurrent duplicates sent to both reach the upstream once,
// retries on either replay the stored answer, another body under the key
// gets 422, and distinct keys each run once.
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

	up := newChargeUpstream(t, func(n int64) {
		if n == 1 {
			time.Sleep(300 * time.Millisecond) // the duplicates arrive while the first runs
		}
	})
	proxies := []string{serveUntilEnd(t, "--upstream", up.URL, "--store", storeURL), serveUntilEnd(t, "--upstream", up.URL, "--store", storeURL)}

	const dups = 10
	answers := make([]*answer, dups)
	errs := make([]error, dups)
	var wg sync.WaitGroup
	for i := range dups {
		wg.Go(func() { answers[i], errs[i] = post(ctx, proxies[i%2]+"/payments", "dynamo-dup", `{"amount":1}`) })
	}
	wg.Wait()
	winners := 0
	for i, a := range answers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		switch a.status {
		case 201:
			winners++
			if a.body != `{"charge":1}` {
				t.Fatalf("duplicate %d got %q, want the first answer", i, a.body)
			}
		case 409: // in flight at one of the gateways
		default:
			t.Fatalf("duplicate %d: %d %s", i, a.status, a.body)
		}
	}
	if n := up.calls.Load(); n != 1 || winners == 0 {
		t.Fatalf("upstream called %d times for one key through two gateways (%d answers 201), want 1", n, winners)
	}
	for i, p := range proxies {
		again, err := post(ctx, p+"/payments", "dynamo-dup", `{"amount":1}`)
		if err != nil || again.status != 201 || again.body != `{"charge":1}` || again.header.Get(retrysafe.HeaderReplayed) != "true" {
			t.Fatalf("retry through gateway %d = %+v, %v; want the replayed first answer", i, again, err)
		}
	}
	if a, err := post(ctx, proxies[1]+"/payments", "dynamo-dup", `{"amount":2}`); err != nil || a.status != 422 {
		t.Fatalf("same key, other body = %+v, %v; want 422", a, err)
	}
	for i := range 10 {
		a, err := post(ctx, proxies[i%2]+"/payments", fmt.Sprintf("dynamo-key-%d", i), `{"amount":1}`)
		if err != nil || a.status != 201 {
			t.Fatalf("key %d = %+v, %v", i, a, err)
		}
	}
	if n := up.calls.Load(); n != 11 {
		t.Fatalf("upstream calls = %d, want 11", n)
	}
	recs, err := s.(admin.Admin).List(ctx, &admin.ListParams{})
	if err != nil || len(recs) != 11 {
		t.Fatalf("List = %d records, %v; want 11", len(recs), err)
	}
}
