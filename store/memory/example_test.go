package memory_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
)

// A claim wins once; a duplicate of the same key gets the stored answer.
func Example() {
	s := memory.New(memory.Config{MaxRecords: 10_000})
	defer s.Close()
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

	first, _ := s.Claim(ctx, &retrysafe.ClaimParams{
		Scope: "tenant-a", Key: "order-42", Fingerprint: "fp",
		Token: retrysafe.NewToken(), Now: now, Lease: 30 * time.Second,
	})
	fmt.Println("first claim won:", first.Claimed, "attempt", first.Record.Attempt)

	_ = s.Complete(ctx, &retrysafe.CompleteParams{
		Scope: "tenant-a", Key: "order-42", Token: first.Record.Token,
		Now: now.Add(time.Second), TTL: 24 * time.Hour,
		Response: &retrysafe.Response{Status: http.StatusCreated, Body: []byte(`{"id":42}`)},
	})

	dup, _ := s.Claim(ctx, &retrysafe.ClaimParams{
		Scope: "tenant-a", Key: "order-42", Fingerprint: "fp",
		Token: retrysafe.NewToken(), Now: now.Add(time.Minute), Lease: 30 * time.Second,
	})
	fmt.Println("duplicate won:", dup.Claimed, "replays", dup.Record.Response.Status, string(dup.Record.Response.Body))
	// Output:
	// first claim won: true attempt 1
	// duplicate won: false replays 201 {"id":42}
}
