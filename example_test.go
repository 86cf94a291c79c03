package retrysafe_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
)

// A handler that charges a card, protected by the middleware: the second
// request with the same key gets the stored answer, and the card is charged
// once.
func ExampleNewMiddleware() {
	store := memory.New(memory.Config{}) // sqlite.Open(…) in production
	defer store.Close()

	protect, err := retrysafe.NewMiddleware(retrysafe.Config{Store: store, RequireKey: true})
	if err != nil {
		log.Fatal(err)
	}
	charges := 0
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"payment":"pay_%d","status":"succeeded"}`, charges)
	})
	srv := httptest.NewServer(protect(pay))
	defer srv.Close()

	for range 2 { // a double click
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"orderId":"order-123","amount":49900}`))
		req.Header.Set("Idempotency-Key", "6f2c4d8e-9c77-4d92-a9b3-2d0f9a1c8a11")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(body))
	}
	fmt.Println("charges:", charges)
	// Output:
	// 201  {"payment":"pay_1","status":"succeeded"}
	// 201 true {"payment":"pay_1","status":"succeeded"}
	// charges: 1
}

// A queue consumer that may see a message twice: Do runs the effect once
// and returns the stored result to the duplicate.
func ExampleDo() {
	store := memory.New(memory.Config{})
	defer store.Close()

	credits := 0
	credit := func(ctx context.Context) (int, error) {
		credits++
		return 100, nil // the new balance
	}
	for range 2 { // the same message, delivered twice
		balance, err := retrysafe.Do(context.Background(), store, "msg-42", "credit:100", credit)
		fmt.Println(balance, err)
	}
	fmt.Println("credits:", credits)
	// Output:
	// 100 <nil>
	// 100 <nil>
	// credits: 1
}
