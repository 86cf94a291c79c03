package dynamodb_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/storetest"
)

// BenchmarkClaimComplete measures a new request's store work, a Claim
// then a Complete with a small response, against the floor of any
// DynamoDB store: a raw PutItem then UpdateItem of the same size through
// the same client, in the same run (report the ratio store/raw):
//
//	go test -run '^$' -bench BenchmarkClaimComplete -count 6 ./store/dynamodb/ | tee new.txt; benchstat new.txt
func BenchmarkClaimComplete(b *testing.B) {
	table := newTable(b)
	client := newClient(b, endpoint(), nil)
	s := newStoreOn(b, table, nil)
	resp := &retrysafe.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"pay_123","amount":2599,"currency":"eur"}`)}
	b.Run("store", func(b *testing.B) {
		ctx := b.Context()
		run := retrysafe.NewToken() // keys of their own for each -count
		n := 0
		for b.Loop() {
			n++
			p := &retrysafe.ClaimParams{Scope: "bench", Key: run + strconv.Itoa(n), Fingerprint: "fp", Token: retrysafe.NewToken(), Now: storetest.Base, Lease: 30 * time.Second}
			if res, err := s.Claim(ctx, p); err != nil || !res.Claimed {
				b.Fatalf("Claim: %+v, %v", res, err)
			}
			if err := s.Complete(ctx, &retrysafe.CompleteParams{Scope: "bench", Key: p.Key, Token: p.Token, Now: storetest.Base, TTL: time.Hour, Response: resp}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw", func(b *testing.B) {
		ctx := b.Context()
		run := retrysafe.NewToken()
		n := 0
		for b.Loop() {
			n++
			key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberB{Value: []byte(run + strconv.Itoa(n))}}
			item := map[string]types.AttributeValue{"pk": key["pk"], "st": &types.AttributeValueMemberS{Value: "p"}, "tok": &types.AttributeValueMemberS{Value: retrysafe.NewToken()}}
			if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
				b.Fatal(err)
			}
			if _, err := client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String(table), Key: key, UpdateExpression: aws.String("SET st = :c, rb = :rb"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":c": &types.AttributeValueMemberS{Value: "c"}, ":rb": &types.AttributeValueMemberB{Value: resp.Body}},
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
