package retrysafe

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Instance is not set by retrysafe; it is here for completeness.
	Instance string `json:"instance,omitempty"`
}

// Problem type slugs, appended to Config.ProblemBase to form the "type" URI.
// They are stable: clients may match on them.
const (
	ProblemMissingKey        = "missing-key"         // 400
	ProblemInvalidKey        = "invalid-key"         // 400
	ProblemMismatch          = "key-reused"          // 422
	ProblemInProgress        = "request-in-progress" // 409
	ProblemBodyTooLarge      = "body-too-large"      // 413
	ProblemStoreUnavailable  = "store-unavailable"   // 503
	ProblemResponseNotStored = "response-not-stored" // 500, replayed
)

// ContentTypeProblem is the media type of problem responses.
const ContentTypeProblem = "application/problem+json"

// WriteProblem writes p as application/problem+json. When retryAfter is
// positive a Retry-After header (whole seconds, at least 1) is added.
func WriteProblem(w http.ResponseWriter, p *Problem, retryAfter time.Duration) {
	h := w.Header()
	h.Set("Content-Type", ContentTypeProblem)
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfterSeconds(retryAfter)))
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

func retryAfterSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}

func (c *Config) problem(slug, title string, status int, detail string) *Problem {
	return &Problem{Type: c.ProblemBase + slug, Title: title, Status: status, Detail: detail}
}
