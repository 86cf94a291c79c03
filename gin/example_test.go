package retrysafegin_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/retrysafe/retrysafe"
	retrysafegin "github.com/retrysafe/retrysafe/gin"
	"github.com/retrysafe/retrysafe/store/memory"
)

// A Gin route behind New: the retry with the same key gets the first
// answer, marked replayed, and the handler runs once.
func ExampleNew() {
	protect, err := retrysafegin.New(retrysafe.Config{Store: memory.New(memory.Config{}), RequireKey: true})
	if err != nil {
		log.Fatal(err)
	}
	r := gin.New()
	charges := 0
	r.POST("/payments", protect, func(c *gin.Context) {
		charges++
		c.JSON(http.StatusCreated, gin.H{"id": fmt.Sprintf("pay_%d", charges)})
	})
	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":100}`))
		req.Header.Set("Authorization", "Bearer sk_test_1")
		req.Header.Set("Idempotency-Key", "order-42")
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		fmt.Printf("%d %s replayed=%v\n", rec.Code, rec.Body, rec.Header().Get("Idempotent-Replayed") == "true")
	}
	fmt.Println("charges:", charges)
	// Output:
	// 201 {"id":"pay_1"} replayed=false
	// 201 {"id":"pay_1"} replayed=true
	// charges: 1
}
