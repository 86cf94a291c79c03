package retrysafe_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/store/memory"
)

// A cookie-session app: callers are told apart by their session cookie,
// and a keyed request without one is refused rather than run in a key
// space shared by every anonymous caller.
func ExampleScopeFromCookie() {
	store := memory.New(memory.Config{})
	defer store.Close()
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{
		Store:        store,
		Scope:        retrysafe.ScopeFromCookie("session"),
		ScopeSource:  "the session cookie (log in first)",
		RequireScope: true,
	})
	if err != nil {
		panic(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	for _, cookie := range []string{"session=alice; _ga=GA1.1.1", ""} {
		r := httptest.NewRequest(http.MethodPost, "/orders", nil)
		r.Header.Set("Idempotency-Key", "order-1")
		if cookie != "" {
			r.Header.Set("Cookie", cookie)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code)
	}
	// Output:
	// 201
	// 400
}
